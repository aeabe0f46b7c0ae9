"""Shared by the GPU tests: a record of every evaluation child a test starts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cudagym.sandbox import Child


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Every Child started while the test runs."""
    started: list[Child] = []
    init = Child.__init__

    def recording_init(self: Child, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        started.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Child, "__init__", recording_init)
        yield started
