"""The candidate pool: spares started ahead, how a stage's end is classified, nothing left after close."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cudagym import forkserver
from cudagym.backends import resolve_backend
from cudagym.candidate_pool import CandidatePool, Phases, classify
from cudagym.evaluator import EvalConfig
from cudagym.harness.common import PROFILER_WARMUP_ENV, WARMUP_SLOT_ENV
from cudagym.harness.protocol import CandidateJob
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
    assert status is Status.RUNTIME_ERROR and message == "CUDA fault while running ModelNew: " + fault["message"]
    torch_text = {**fault, "message": "CUDA error: misaligned address\nCUDA kernel errors might be ...\nframe #0: x"}
    _, message, _ = classify(Reported([{"stage": "run", "ok": False, "error": torch_text}]), True, 1, 10)
    assert message == "CUDA fault while running ModelNew: CUDA error: misaligned address"  # its first line alone
    status, message, sig = classify(Reported([{"stage": "run"}]), True, -11, 10)
    assert status is Status.CRASH and sig == "SIGSEGV" and "while running" in message
    serving = Reported([{"stage": "calibrating"}, {"stage": "load"}, {"stage": "ready"}])  # killed during its calls
    assert "while running" in classify(serving, True, -11, 10)[1]
    assert "while loading" in classify(Reported([{"stage": "load"}]), True, -11, 10)[1]
    assert classify(Reported([{"stage": "load"}]), True, 3, 10)[0] is Status.CRASH


def spares_of(pool: CandidatePool, timeout: float = 120.0) -> list[Any]:
    """The pool's spares once there are any (a fork server fills the pool when it is ready)."""
    deadline = time.monotonic() + timeout
    while not pool._spares and time.monotonic() < deadline:
        time.sleep(0.05)
    return list(pool._spares)


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "new-interpreter"])
def test_spares_are_started_ahead_and_none_survive_close(fork_server: bool) -> None:
    pool = CandidatePool(resolve_backend("cpu"), ChildLimits(), prestart=3, env={}, fork_server=fork_server)
    assert pool.prestart == 1  # on the CPU, warming processes would share the cores with timed runs
    pool.fill()
    (spare,) = spares_of(pool)
    assert spare.forked is fork_server and not pool.fork_server_error
    assert spare.receive(time.monotonic() + 60) == {"stage": "warm"}  # torch imported, waiting for a job
    server = pool._server
    pool.close()
    assert not spare.alive and not pool._spares
    assert server is None or server.proc.poll() is not None


def test_the_processes_are_told_while_a_close_waits_for_the_fork_server() -> None:
    # the machine pool weighs evaluators by their processes from its dispatcher, which answers jobs at their
    # deadlines: a close that waits for a fork server slow to exit (stopped here: it is waited for, then killed)
    # must not hold that answer up
    pool = CandidatePool(resolve_backend("cpu"), ChildLimits(), prestart=1, env={})
    pool.fill()
    (spare,) = spares_of(pool)
    server = pool._server
    assert server is not None and set(pool.process_ids()) == {server.proc.pid, spare.proc.pid}
    os.kill(server.proc.pid, signal.SIGSTOP)
    closing = threading.Thread(target=pool.close)
    start = time.monotonic()
    closing.start()
    time.sleep(0.5)
    assert closing.is_alive()  # still waiting for the stopped server
    assert pool.process_ids() == [] and time.monotonic() - start < 2.0
    closing.join(timeout=30)
    assert not closing.is_alive() and server.proc.poll() is not None and not spare.alive


def test_a_pool_whose_fork_server_cannot_start_falls_back_to_new_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkserver, "READY_TIMEOUT_S", 0.0)  # the server is never ready in time
    pool = CandidatePool(resolve_backend("cpu"), ChildLimits(), prestart=1, env={})
    try:
        child = pool.start(CandidateJob(mode="import", workspace="/nonexistent"))
        assert not child.forked and "not ready" in pool.fork_server_error
    finally:
        pool.close()


def test_phases_are_kept_in_order() -> None:
    phases = Phases(time.monotonic())
    phases.mark("first")
    phases.mark("second")
    assert [name for name, _ in phases.items()] == ["first", "second"]
    assert all(seconds >= 0 for _, seconds in phases.items())


def test_candidates_are_forked_by_default_on_both_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = resolve_backend("cpu")
    cuda = dataclasses.replace(cpu, name="cuda")  # only its name is read here
    assert CandidatePool(cpu, ChildLimits(), 1, {}).fork_server
    assert CandidatePool(cuda, ChildLimits(), 1, {}).fork_server
    assert EvalConfig().tuning.fork_server is True
    assert not CandidatePool(cpu, ChildLimits(), 1, {}, fork_server=False).fork_server
    monkeypatch.setenv("CUDAGYM_FORK_SERVER", "0")
    assert not CandidatePool(cpu, ChildLimits(), 1, {}, fork_server=True).fork_server


def test_a_wrapped_run_lasts_until_the_wrapper_has_written_its_report(tmp_path: Path) -> None:
    """As ncu, which writes its report after the candidate has ended: the wrapper is not killed at the
    candidate's "done" (that lost every ncu report)."""
    report = tmp_path / "report.txt"
    (tmp_path / "model_new.py").write_text("class ModelNew:\n    pass\n")
    wrapper = ("/bin/sh", "-c", f'"$@"; status=$?; sleep 0.5; echo written > {report}; exit $status', "wrapper")
    pool = CandidatePool(resolve_backend("cpu"), ChildLimits(), 0, {})
    try:
        child, finished, code = pool.run(CandidateJob(mode="import", workspace=str(tmp_path)), 60, prefix=wrapper)
        assert finished and code == 0, child.output.text()
        assert classify(child, finished, code, 60)[0] is Status.OK
        assert report.read_text() == "written\n"
    finally:
        pool.close()


def test_a_wrapped_candidate_takes_no_device_slot_of_its_own(tmp_path: Path) -> None:
    """A wrapped run (ncu, compute-sanitizer) lives inside its caller's shared slot; a candidate that queued for
    another shared slot at the turnstile would wait behind any timing that waits for the caller's slot: a hang
    to the run's deadline (seen with compute-sanitizer beside another env's profiles). A candidate of a stage
    still gets the slot, in which it creates its CUDA context."""
    seen = tmp_path / "env.txt"
    (tmp_path / "model_new.py").write_text("class ModelNew:\n    pass\n")
    show = f'echo "${{{WARMUP_SLOT_ENV}-none}} ${{{PROFILER_WARMUP_ENV}-none}}" > {seen}; exec "$@"'
    pool = CandidatePool(resolve_backend("cpu"), ChildLimits(), 0, {WARMUP_SLOT_ENV: "/lock:/gate"})
    try:
        child, finished, code = pool.run(
            CandidateJob(mode="import", workspace=str(tmp_path)), 60, prefix=("/bin/sh", "-c", show, "wrapper")
        )
        assert finished and code == 0, child.output.text()
        assert seen.read_text() == "none 0\n"
        plain = pool._new()
        try:
            assert plain.receive(time.monotonic() + 60) == {"stage": "warm"}
            environ = Path(f"/proc/{plain.proc.pid}/environ").read_bytes().split(b"\0")
            assert f"{WARMUP_SLOT_ENV}=/lock:/gate".encode() in environ
        finally:
            plain.kill()
    finally:
        pool.close()
