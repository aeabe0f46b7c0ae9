"""Fixtures of the baselines tests: the loopback chat endpoint (``chat_stub.ChatStub``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from chat_stub import ChatStub


@pytest.fixture
def chat_stub() -> Iterator[type[ChatStub]]:
    """``chat_stub(replies)`` starts a stub; every stub started through it is stopped after the test."""
    started: list[ChatStub] = []

    class Tracked(ChatStub):
        def __init__(self, replies: Sequence[dict[str, Any] | int], **kwargs: Any) -> None:
            super().__init__(replies, **kwargs)
            started.append(self)
            self.__enter__()

    yield Tracked
    for stub in started:
        stub.stop()
