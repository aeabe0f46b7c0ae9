"""How long the trusted clock waits for a cuda candidate to queue a handshake's calls before its go
(``Clock._await_queued`` in cudagym/harness/clock.py): while the candidate's count of queued calls moves, up to a bound;
once it stalls (a forward that waits for the device waits for the go itself), not at all longer. The GPU tests cover
the handshake around it (tests/gpu/test_gpu_trusted_clock.py)."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest


class _Candidate:
    """What ``_await_queued`` reads of a clock: the control words, whether the candidate lives, the error to raise."""

    def __init__(self, clock: ModuleType) -> None:
        self.words = (ctypes.c_uint64 * 32)()
        self.freezer = self
        self._silent = lambda number: clock.CandidateSilent(f"handshake {number}")
        self._watch = lambda *args: clock.Clock._watch(self, *args)

    def alive(self) -> bool:
        return True


@pytest.fixture
def clock(harness: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The clock module, its bounds stretched so that a busy test machine's scheduling cannot look like a stall."""
    module = harness("clock")
    monkeypatch.setattr(module, "QUEUE_STALL_S", 0.25)
    monkeypatch.setattr(module, "QUEUE_WAIT_S", 1.5)
    return module


@pytest.fixture
def candidate(clock: ModuleType) -> Iterator[_Candidate]:
    """The candidate's side, played by a thread of this process (the clock's spin holds the interpreter lock for a
    switch interval at a time: shortened meanwhile)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.001)
    yield _Candidate(clock)
    sys.setswitchinterval(interval)


def _in_background(work: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def _await(clock: ModuleType, candidate: _Candidate, number: int = 3) -> tuple[bool, float]:
    start = time.monotonic()
    queued = clock.Clock._await_queued(candidate, number, time.monotonic() + 10)
    return queued, time.monotonic() - start


def test_a_candidate_that_queues_and_describes_is_waited_for(clock: ModuleType, candidate: _Candidate) -> None:
    words, handshake = candidate.words, 3

    def queue() -> None:
        for k in range(1, 9):  # calls with host paths longer than the stall bound in all, shorter each
            time.sleep(clock.QUEUE_STALL_S / 3)
            words[clock.PROGRESS] = k
        words[clock.DESCRIBED] = handshake

    _in_background(queue)
    queued, seconds = _await(clock, candidate, handshake)
    assert queued and seconds > 2 * clock.QUEUE_STALL_S


def test_a_stalled_candidate_gets_its_go_once_progress_stops(clock: ModuleType, candidate: _Candidate) -> None:
    candidate.words[clock.PROGRESS] = 1  # one call queued, then a wait for the device: no more progress
    queued, seconds = _await(clock, candidate)
    assert not queued
    assert clock.QUEUE_STALL_S <= seconds < clock.QUEUE_WAIT_S / 2


def test_progress_keeps_the_clock_waiting_only_up_to_its_bound(clock: ModuleType, candidate: _Candidate) -> None:
    stop = threading.Event()

    def creep() -> None:  # progress that never ends (a hostile candidate's): it costs the stage time, nothing else
        while not stop.is_set():
            candidate.words[clock.PROGRESS] += 1
            time.sleep(clock.QUEUE_STALL_S / 5)

    thread = _in_background(creep)
    try:
        queued, seconds = _await(clock, candidate)
    finally:
        stop.set()
        thread.join()
    assert not queued and clock.QUEUE_WAIT_S <= seconds < 4 * clock.QUEUE_WAIT_S
