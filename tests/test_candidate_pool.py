"""The candidate pool: spares started ahead, how a stage's end is classified, nothing left after close."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from cudagym.backends import resolve_backend
from cudagym.candidate_pool import CandidatePool, Phases, classify
from cudagym.results import Status
from cudagym.sandbox import ChildLimits


@dataclasses.dataclass
class Reported:
    """Stands in for a Child whose channel messages are known."""

    messages: list[dict[str, Any]]


def test_how_a_stage_ended_is_classified() -> None:
    done = Reported([{"stage": "warm"}, {"stage": "load"}, {"stage": "run"}, {"stage": "done", "ok": True}])
    assert classify(done, True, 0, 10)[0] is Status.OK
    assert classify(done, False, None, 10)[0] is Status.TIMEOUT
    load_error = Reported([{"stage": "load"}, {"stage": "load", "ok": False, "error": {"type": "ImportError"}}])
    assert classify(load_error, True, 0, 10)[0] is Status.LOAD_ERROR
    fault = {"type": "RuntimeError", "message": "an illegal memory access was encountered", "cuda": "illegal memory"}
    status, message, _ = classify(
        Reported([{"stage": "run"}, {"stage": "run", "ok": False, "error": fault}]), True, 1, 10
    )
    assert status is Status.RUNTIME_ERROR and "CUDA error" in message
    status, message, sig = classify(Reported([{"stage": "run"}]), True, -11, 10)
    assert status is Status.CRASH and sig == "SIGSEGV" and "while running" in message
    assert classify(Reported([{"stage": "load"}]), True, 3, 10)[0] is Status.CRASH


def test_spares_are_started_ahead_and_none_survive_close() -> None:
    pool = CandidatePool(resolve_backend("cpu"), ChildLimits(), prestart=3, env={})
    assert pool.prestart == 1  # on the CPU, warming processes would share the cores with timed runs
    pool.fill()
    spare = pool._spares[0]
    assert spare.receive(time.monotonic() + 60) == {"stage": "warm"}  # torch imported, waiting for a job
    pool.close()
    assert not spare.alive and not pool._spares


def test_phases_are_kept_in_order() -> None:
    phases = Phases(time.monotonic())
    phases.mark("first")
    phases.mark("second")
    assert [name for name, _ in phases.items()] == ["first", "second"]
    assert all(seconds >= 0 for _, seconds in phases.items())
