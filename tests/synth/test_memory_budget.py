"""The device memory the synthesis workers share: holds granted in order while they fit, the whole budget for a
candidate judged alone, and the budget read from the device."""

from __future__ import annotations

import threading
import time

import pytest

from cudagym.backends import Backend, resolve_backend
from cudagym.device_memory import GIB, PROCESS_BYTES, DeviceReading
from cudagym.synth import memory_budget
from cudagym.synth.memory_budget import USABLE_SHARE, MemoryBudget, device_budget


def _holding(
    budget: MemoryBudget, nbytes: int | None, order: list[str], name: str
) -> tuple[threading.Thread, threading.Event]:
    """A thread that takes ``nbytes`` of ``budget`` (None: all of it), notes ``name`` in ``order`` once granted and
    holds until the returned event is set."""
    done = threading.Event()

    def run() -> None:
        with budget.hold(nbytes) if nbytes is not None else budget.alone():
            order.append(name)
            done.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def _until(condition, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_holds_that_fit_together_are_granted_together() -> None:
    budget = MemoryBudget(10)
    order: list[str] = []
    a, release_a = _holding(budget, 4, order, "a")
    b, release_b = _holding(budget, 6, order, "b")
    _until(lambda: len(order) == 2)
    assert budget.held == 10
    release_a.set(), release_b.set()
    a.join(), b.join()
    assert budget.held == 0


def test_a_hold_that_does_not_fit_waits_for_memory_to_come_back() -> None:
    budget = MemoryBudget(10)
    order: list[str] = []
    first, release_first = _holding(budget, 7, order, "first")
    _until(lambda: order == ["first"])
    second, release_second = _holding(budget, 5, order, "second")
    time.sleep(0.1)
    assert order == ["first"] and budget.held == 7
    release_first.set()
    _until(lambda: order == ["first", "second"])
    assert budget.held == 5
    release_second.set()
    first.join(), second.join()


def test_a_large_hold_at_the_head_is_not_overtaken() -> None:
    """First come, first served: a small request behind a waiting large one waits too, so the large one is never
    starved by a stream of small ones."""
    budget = MemoryBudget(10)
    order: list[str] = []
    first, release_first = _holding(budget, 6, order, "first")
    _until(lambda: order == ["first"])
    large, release_large = _holding(budget, 8, order, "large")
    _until(lambda: len(budget._queue) == 1)
    small, release_small = _holding(budget, 2, order, "small")  # would fit beside the first, but queues behind
    time.sleep(0.1)
    assert order == ["first"]
    release_first.set()
    _until(lambda: order == ["first", "large", "small"])
    release_large.set(), release_small.set()
    for thread in (first, large, small):
        thread.join()


def test_alone_waits_for_every_holder_and_keeps_others_out() -> None:
    budget = MemoryBudget(10)
    order: list[str] = []
    held, release_held = _holding(budget, 1, order, "held")
    _until(lambda: order == ["held"])
    alone, release_alone = _holding(budget, None, order, "alone")
    _until(lambda: len(budget._queue) == 1)
    later, release_later = _holding(budget, 1, order, "later")
    time.sleep(0.1)
    assert order == ["held"]
    release_held.set()
    _until(lambda: order == ["held", "alone"])
    time.sleep(0.1)
    assert order == ["held", "alone"] and budget.held == 10
    release_alone.set()
    _until(lambda: order == ["held", "alone", "later"])
    release_later.set()
    for thread in (held, alone, later):
        thread.join()


def test_a_hold_larger_than_the_budget_is_the_whole_budget_not_a_deadlock() -> None:
    budget = MemoryBudget(10)
    with budget.hold(10**12) as waited:
        assert budget.held == 10 and waited >= 0
    with budget.hold(0):
        assert budget.held == 1
    assert budget.held == 0
    with pytest.raises(ValueError, match="positive capacity"):
        MemoryBudget(0)


def test_the_budget_comes_from_the_free_device_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = Backend(name="cuda", device="cuda", device_name="NVIDIA H100 80GB HBM3", arch="sm_90")
    readings = {"now": DeviceReading(free_bytes=80 * GIB, total_bytes=80 * GIB)}
    monkeypatch.setattr(memory_budget, "nvidia_smi_probe", lambda backend: lambda: readings["now"])
    budget = device_budget(cuda, workers=12)
    assert budget is not None
    assert budget.capacity == int(80 * GIB * USABLE_SHARE) - 12 * PROCESS_BYTES
    assert device_budget(cuda, workers=1) is None  # nothing to share
    assert device_budget(resolve_backend("cpu"), workers=12) is None  # no device memory
    readings["now"] = DeviceReading(free_bytes=10 * GIB, total_bytes=80 * GIB)
    assert device_budget(cuda, workers=12) is None  # too little left for a budget: none, with a warning
    readings["now"] = None
    assert device_budget(cuda, workers=12) is None  # the device cannot be read
