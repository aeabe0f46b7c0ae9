"""Fixtures for the harness's own modules."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

import cudagym.harness


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], ModuleType]]:
    """Imports a harness module under its own name, with its siblings on the path, as the reference and candidate
    processes load them; every module imported meanwhile is forgotten after the test."""
    monkeypatch.syspath_prepend(str(Path(cudagym.harness.__file__).parent))
    before = set(sys.modules)
    yield importlib.import_module
    for name in set(sys.modules) - before:
        del sys.modules[name]
