"""The baselines a profile is measured against: eager PyTorch and ``torch.compile``, timed by the reference process
(``harness/timing.py``) and cached per task, device and torch (``cudagym.baseline_cache``); timed ahead of a task's
first profile where it is prepared ahead, timed now where nothing is cached, and judged for each profile against the
eager times taken beside its candidate (``stage_judgement.judge_baselines``). Their results: ``Baselines`` (the
times) and ``stage_judgement.BaselineVerdict`` (a profile's)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from cudagym.harness.protocol import Baseline, CompileDone, CompileReference, CompileState, Drop, Timed
from cudagym.reference_process import ReferenceProcess
from cudagym.stage_judgement import BaselineVerdict, judge_baselines
from cudagym.stages.candidates import unchecked_inputs
from cudagym.tasks.task import Task

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator

logger = logging.getLogger("cudagym.evaluator")
COMPILE_POLL_S = 0.1  # how often the baselines timed ahead ask whether the reference's torch.compile is done


class Baselines(NamedTuple):
    """A task's baseline times (a tuple: ``eager_ms, compile_ms, from_cache = ...`` reads it too)."""

    eager_ms: float
    compile_ms: float | None  # None when ``EvalConfig.compile_baseline`` is off (tiers then stop at 2)
    from_cache: bool


def cached(ev: LocalEvaluator, task: Task | None = None) -> dict[str, Any] | None:
    """The cached baselines of ``task`` (default: the current one) when they hold every one this
    configuration needs, else None."""
    return ev.baseline_cache.read(task or ev.task, need_compile=ev.config.compile_baseline)


def baselines(
    ev: LocalEvaluator,
    key: str,
    *,
    ref: ReferenceProcess | None = None,
    task: Task | None = None,
    retime: bool = False,
) -> Baselines:
    """The baselines of ``task`` (default: the current one), measured on the reference's input set ``key`` when
    not cached (or, with ``retime``, whatever the cache holds), each in the device's timing slot.

    ``ref``: the reference process to use as it is (the timing ahead, which must not wait for a preparation)."""
    task = task or ev.task
    data = None if retime else cached(ev, task)
    if data is not None:
        return from_cache(ev, data)
    timing = dataclasses.asdict(ev.timing)
    ref = ref or ev.reference()
    if ev.config.compile_baseline:
        # nothing is timed beside a compile: its code generation would stretch the timed calls
        await_reference_compile(ev, ref, task)
        with ev._shared_slot("reference compile"):  # its first call generates code and runs: never timed
            ref.call(CompileReference(key=key))
    ev.pool.join_reapers()  # a used candidate still tearing down its CUDA context would disturb the timing
    with ev._timing_slot("baselines"):
        data = None if retime else cached(ev, task)  # another environment may have timed them
        if data is not None:
            return from_cache(ev, data)
        eager = ref.call(Baseline(key=key, mode="eager", timing=timing))
        compiled = None
        if ev.config.compile_baseline:
            compiled = ref.call(Baseline(key=key, mode="compile", timing=timing)).median_ms
    ev.baseline_cache.write(task, eager.median_ms, compiled, eager_spread=eager.spread)
    return Baselines(eager.median_ms, compiled, False)


def from_cache(ev: LocalEvaluator, data: dict[str, Any]) -> Baselines:
    """``baselines``' answer from a cache record."""
    return Baselines(data["eager_ms"], data["compile_ms"] if ev.config.compile_baseline else None, True)


def await_reference_compile(ev: LocalEvaluator, ref: ReferenceProcess, task: Task) -> CompileState:
    """Waits, without holding the reference process, until a torch.compile it runs in the background is
    done (other threads' checks are served meanwhile), and returns its ``compile_done`` reply; raises when
    the task changed or the evaluator closes."""
    deadline = time.monotonic() + ev.config.reference_timeout
    while not (state := ref.call(CompileDone())).done:
        if ev._closing or ev.task is not task:
            raise RuntimeError("the task changed or the evaluator closed while torch.compile ran")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the reference's torch.compile took more than {ev.config.reference_timeout:g} s")
        time.sleep(COMPILE_POLL_S)
    return state


def time_ahead(ev: LocalEvaluator, ref: ReferenceProcess, task: Task, key: str) -> None:
    """The baselines of ``task`` timed ahead (in their own thread, ``LocalEvaluator._baselining``), as soon as the
    reference's background compile is done, so that a first profile that comes later finds them cached instead of
    timing them itself. Drops the input set ``key`` when done."""
    try:
        if ev.config.compile_baseline:
            seconds = await_reference_compile(ev, ref, task).seconds
            done = time.monotonic() - ev._ahead_start
            if "build" in seconds:  # when its imports were there: then came the build, the device's slot and a run
                after_imports = sum(value for step, value in seconds.items() if step != "imports")
                ev.ahead_marks["compiler_imported"] = round(done - after_imports, 3)
            ev.ahead_marks["compile_done"] = round(done, 3)
        baselines(ev, key, ref=ref, task=task)
        ev.ahead_marks["baselines_timed"] = round(time.monotonic() - ev._ahead_start, 3)
    except Exception as exc:  # the profile times what is missing and reports its own errors
        if not ev._closing and ev.task is task:
            ev.ahead_error = f"baselines: {type(exc).__name__}: {exc}"
            logger.warning("timing %s's baselines ahead failed (the profile times them): %s", task.id, exc)
    finally:
        if ref.alive and not ev._closing:
            try:
                ref.call(Drop(key=key))
            except RuntimeError as exc:
                ev.ahead_error = f"baselines: dropping their inputs: {exc}"
                logger.warning("dropping the inputs of %s's baselines timed ahead failed: %s", task.id, exc)


def for_profile(
    ev: LocalEvaluator, ref: ReferenceProcess, deadline: float, timed: Timed | None
) -> tuple[BaselineVerdict, bool]:
    """A profile's baselines, asked for once its candidate is timed: those being timed ahead, waited for outside
    any memory slot (a first profile's candidate is timed while the reference still compiles), or else timed
    now; then judged against eager timed beside the candidate (``stage_judgement.judge_baselines``) and timed
    again when the cache proves stale. Returns the verdict and whether the times came from the cache."""
    await_ahead(ev, deadline)
    data = cached(ev)
    if data is None:
        eager_ms, compile_ms, _ = fresh(ev, ref, deadline)
        data = {"eager_ms": eager_ms, "compile_ms": compile_ms, "eager_spread": 0.0}
        from_the_cache = False
    else:
        from_the_cache = True
    timed = timed or Timed()
    slowed = timed.clock_slowed * 4 > max(1, timed.handshakes)
    compile_ms = data["compile_ms"] if ev.config.compile_baseline else None
    verdict = judge_baselines(
        data["eager_ms"],
        compile_ms,
        float(data.get("eager_spread") or 0.0),
        timed.eager_ms,
        cuda=ev.backend.is_cuda,
        clock_slowed=slowed,
    )
    if timed.calibration_disturbed:
        detail = f"{verdict.detail}; the clock's calibration was never steady (calls {timed.calibration_disturbed})"
        verdict = dataclasses.replace(verdict, fair=False, detail=detail)
    if verdict.retime:
        eager_ms, compile_ms, _ = fresh(ev, ref, deadline, retime=True)
        verdict = dataclasses.replace(
            verdict, eager_ms=eager_ms, compile_ms=compile_ms, detail=f"{verdict.detail}; timed again"
        )
        from_the_cache = False
    return verdict, from_the_cache


def fresh(ev: LocalEvaluator, ref: ReferenceProcess, deadline: float, *, retime: bool = False) -> Baselines:
    """The baselines timed now on an input set of their own (``baselines``)."""
    with ev._memory_slot(deadline):
        unchecked_inputs(ev, ref, "baselines")
        try:
            return baselines(ev, "baselines", retime=retime)
        finally:
            ref.call(Drop(key="baselines"))


def await_ahead(ev: LocalEvaluator, deadline: float) -> None:
    """Waits for the baselines being timed ahead (a profile would otherwise time them a second time), until
    ``deadline`` at most: past it the profile goes on and times whatever is still missing itself."""
    thread = ev._baselining
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
