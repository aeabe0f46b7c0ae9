"""The profile stage: ModelNew timed on the reference process's clock (every call on fresh inputs and every timed
call's output compared in full), compared with the eager and torch.compile baselines (``baselines``), and the run-time
integrity checks judged (``cudagym.integrity.runtime``: own kernels, the roofline bound, ...). Its result:
``ProfileResult``."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from cudagym.candidate_pool import Phases, candidate_output, classify
from cudagym.candidate_stage import candidate_stage
from cudagym.harness.protocol import AwaitCompile, HostBandwidth, Timed
from cudagym.integrity import runtime
from cudagym.reference_process import ReferenceProcess
from cudagym.results import CompileResult, IntegrityFinding, ProfileResult, Stage, Status
from cudagym.stage_judgement import calibration_problem, check_result, timing_findings
from cudagym.stage_memo import candidate_key
from cudagym.stages import baselines, faults, wrapped
from cudagym.stages.candidates import harness_failure, prechecks, serving_stage
from cudagym.stages.verification import describe_check
from cudagym.workspace import Workspace

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator

logger = logging.getLogger("cudagym.evaluator")
# what of the clock's reply a ProfileResult keeps (``ProfileResult.clock``)
CLOCK_FIELDS = (
    "calibration",
    "phases_us",
    "handshakes",
    "queued_handshakes",
    "clock_slowed",
    "clock_quickened",
    "calibration_disturbed",
    "times_ms",
    "run_time_us",
    "warmup_s",
    "checks_s",
    "eager_s",
)


def clock_figures(timed: Timed | None) -> dict[str, Any]:
    """The trusted clock's own figures of a timing (``CLOCK_FIELDS``) as plain values, for ``ProfileResult.clock``."""
    figures = dataclasses.asdict(timed) if timed else {}
    return {name: figures.get(name) for name in CLOCK_FIELDS}


def profile(
    ev: LocalEvaluator, workspace: Workspace, *, ncu: bool = False, compiled: CompileResult | None = None
) -> ProfileResult:
    """Times ModelNew on the reference process's clock (every call on fresh inputs and every timed call's output
    compared in full), and compares with the eager and torch.compile baselines (cached per task, device and
    torch, and re-validated by eager timed beside the candidate). A run that ran out of device memory on its own is
    run once more (``faults.judged_twice``)."""
    return faults.judged_twice(ev, lambda: _profile_once(ev, workspace, ncu, compiled))


def _profile_once(ev: LocalEvaluator, workspace: Workspace, ncu: bool, compiled: CompileResult | None) -> ProfileResult:
    """One run of :func:`profile`."""
    start = time.monotonic()
    compiled, failure = prechecks(ev, workspace, Stage.PROFILE, ProfileResult, compiled)
    if failure is not None:
        return failure
    assert compiled is not None
    key = candidate_key(workspace, compiled, ev.task, ev.backend, ev.config)
    known = ev.memo.recall(key, Stage.PROFILE, time.monotonic() - start)
    if known is not None:
        return known
    deadline = time.monotonic() + ev.config.profile_timeout
    phases = Phases(start)
    phases.mark("prechecks")
    timed: Timed | None = None
    candidate_from: float | None = None  # when the candidate's own time began (after the harness's waits)
    try:
        ev.pool.join_reapers()  # no used candidate still tearing down its CUDA context on the device
        # quiet device while timing: no successor starts (CUDA init) meanwhile
        with candidate_stage(serving_stage(ev, workspace, compiled, deadline, refill=False)) as stage:
            ref = stage.ref
            phases.mark("reference")
            with ev._memory_slot(deadline):
                phases.mark("memory_slot")
                if stage.start():
                    # the reference is the clock: a torch.compile in its background would hold its interpreter
                    # between the clock's readings (and, on cpu, take the cores the timed calls run on)
                    ref.call(AwaitCompile())
                    with ev._timing_slot("calibration", deadline):
                        calibrated = stage.calibrate()
                    candidate_from = time.monotonic() if calibrated else None
                    phases.mark("calibration")
                    if calibrated and stage.await_ready():
                        phases.mark("candidate_load")
                        with ev._timing_slot("candidate", deadline):
                            timed = stage.time(
                                dataclasses.asdict(ev.timing),
                                ev.atol,
                                ev.rtol,
                                ev.policy.precision_mode(ev.task.metadata.dtype),
                            )
                        phases.mark("timing")
                finished, code = stage.finish()
                phases.mark("candidate_exit")
            child = stage.child
            status, message, sig = classify(child, finished, code, ev.config.profile_timeout, stage.silent)
            shortage = faults.machine_shortage(ev, status, message)
            if shortage is not None:
                status, message = Status.HARNESS_ERROR, shortage
            kernels = stage.kernels()
            ev.pool.fill()
            ncu_text = wrapped.ncu(ev, workspace, compiled) if ncu else ""
            if ncu:
                phases.mark("ncu")
        verdict, cached = baselines.for_profile(ev, ref, deadline, timed)
        phases.mark("baselines")
    except RuntimeError as exc:
        return harness_failure(ProfileResult, Stage.PROFILE, exc, start)
    stderr = candidate_output(child, workspace, ev.config.output_chars)
    own_failure = status not in (Status.OK, Status.HARNESS_ERROR)  # the machine's shortage is no fault of the code
    fault = faults.cuda_fault(ev, workspace, compiled, child, stderr) if own_failure else None
    candidate_ms = timed.median_ms if timed else None
    findings = timing_findings(timed, ev.policy) if timed else []
    if timed:  # the precision policy, and whether a failed timed call failed its float64 bound
        ratio = timed.failure.precision_ratio if timed.failure else None
        detail = ev.policy.precision_detail(ev.task.metadata.dtype, [ratio] if ratio is not None else [])
        findings.append(IntegrityFinding("precision", (ratio or 0.0) <= 1.0, detail))
    miscalibrated = calibration_problem(timed) if timed else None
    if candidate_ms is not None:
        findings.append(runtime.own_kernels(kernels, ev.backend.is_cuda, ev.policy))
        if miscalibrated is None:  # a figure the clock cannot vouch for is no evidence against the candidate
            findings.append(roofline(ev, ref, candidate_ms, stage.moved_bytes))
    broken = runtime.first_failure(findings)
    failed = timed.failure if timed else None
    eager_ms, compile_ms = verdict.eager_ms, verdict.compile_ms
    if status is Status.OK and failed is not None and failed.inputs_unchanged is not False:
        status = Status.MISMATCH
        message = f"Wrong output on a timed call (fresh inputs): {describe_check(check_result(failed))}"
    elif status is Status.OK and broken is not None:
        status = Status.INTEGRITY
        message = f"Integrity check '{broken.check}' failed: {broken.detail}"
    elif status is Status.OK and miscalibrated is not None:
        status, message = Status.HARNESS_ERROR, miscalibrated
    elif status is Status.OK and candidate_ms is None:
        status = Status.HARNESS_ERROR
        message = "The timing gave no figure."
    speedup_eager = eager_ms / candidate_ms if candidate_ms else None
    speedup_compile = compile_ms / candidate_ms if candidate_ms and compile_ms else None
    if status is Status.OK:
        message = f"ModelNew {candidate_ms:.4g} ms | eager {eager_ms:.4g} ms ({speedup_eager:.3g}x) | " + (
            f"torch.compile {compile_ms:.4g} ms ({speedup_compile:.3g}x)"
            if compile_ms is not None
            else "torch.compile not timed (compile_baseline=False)"
        )
        if not verdict.fair:
            message += f" | not a fair figure ({verdict.detail}): profile again when the machine is quiet"
    result = ProfileResult(
        stage=Stage.PROFILE,
        status=status,
        message=message,
        seconds=time.monotonic() - start,
        candidate_ms=candidate_ms,
        eager_ms=eager_ms,
        compile_ms=compile_ms,
        speedup_eager=speedup_eager,
        speedup_compile=speedup_compile,
        repetitions=timed.reps if timed else 0,
        spread=timed.spread if timed else None,
        kernels=kernels,
        device=ev.backend.device_name,
        method=timed.method if timed else "",
        baseline_cached=cached,
        timing_fair=verdict.fair,
        baseline_check=verdict.detail,
        calls_per_handshake=timed.calls_per_handshake if timed else 0,
        checked_calls=timed.checked_calls if timed else 0,
        clock=clock_figures(timed),
        ncu=ncu_text,
        stderr=stderr,
        signal=sig,
        fault=fault,
        integrity=tuple(findings),
        phases=phases.items(),
    )
    own = deadline - candidate_from if candidate_from is not None else None
    ev.memo.remember(key, result, candidate_seconds=own, timeout=ev.config.profile_timeout)
    logger.info(
        "profile %s: %s in %.1f s (candidate %s ms, eager %s ms)",
        ev.task.id,
        status.value,
        result.seconds,
        f"{candidate_ms:.4g}" if candidate_ms is not None else "n/a",
        f"{eager_ms:.4g}" if eager_ms is not None else "n/a",
    )
    if not verdict.fair:
        logger.warning("profile %s: the machine was busy, the speedups are the conservative ones", ev.task.id)
    return result


def roofline(ev: LocalEvaluator, ref: ReferenceProcess, candidate_ms: float, moved_bytes: int) -> IntegrityFinding:
    """The speed-of-light bound. A GPU's bandwidth is read from its properties; a host's was measured at load,
    which a busy host or a task whose data fits in the caches makes too low, so a cpu profile that would fail
    is judged again on a bandwidth the reference process measures now for the task's working set."""
    finding = runtime.within_roofline(candidate_ms, moved_bytes, ev._peak_bandwidth)
    if finding.passed or ev.backend.is_cuda:
        return finding
    try:
        fresh = ref.call(HostBandwidth(nbytes=moved_bytes)).bytes_per_s
    except RuntimeError as exc:
        logger.warning("the host's bandwidth could not be measured again: %s", exc)
        return finding
    return runtime.within_roofline(candidate_ms, moved_bytes, max(fresh, ev._peak_bandwidth or 0.0))
