"""The verify stage: ModelNew run on ``num_checks`` fresh input sets (and check 1's inputs once more, for
determinism) in one candidate process, every output read and compared by the reference process. Its result:
``VerifyResult``."""

from __future__ import annotations

import logging
import secrets
import time
from typing import TYPE_CHECKING

from cudagym.candidate_pool import Phases, candidate_output, classify
from cudagym.candidate_stage import candidate_stage
from cudagym.harness.protocol import Verified
from cudagym.integrity import runtime
from cudagym.results import CheckResult, CompileResult, IntegrityFinding, Stage, Status, VerifyResult
from cudagym.stage_judgement import verify_outcome
from cudagym.stage_memo import candidate_key
from cudagym.stages import faults
from cudagym.stages.candidates import harness_failure, prechecks, serving_stage
from cudagym.tasks.input_verdict import KIND_NAMES
from cudagym.workspace import Workspace

if TYPE_CHECKING:
    from cudagym.evaluator import LocalEvaluator

logger = logging.getLogger("cudagym.evaluator")


def verify(ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult | None = None) -> VerifyResult:
    """Runs ModelNew on ``num_checks`` fresh input sets (and check 1's inputs once more, for determinism) in
    one candidate process; the reference process writes every input set, reads every output and compares. A run
    that ran out of device memory on its own is run once more (``faults.judged_twice``)."""
    return faults.judged_twice(ev, lambda: _verify_once(ev, workspace, compiled))


def _verify_once(ev: LocalEvaluator, workspace: Workspace, compiled: CompileResult | None) -> VerifyResult:
    """One run of :func:`verify`."""
    start = time.monotonic()
    compiled, failure = prechecks(ev, workspace, Stage.VERIFY, VerifyResult, compiled)
    if failure is not None:
        return failure
    assert compiled is not None
    key = candidate_key(workspace, compiled, ev.task, ev.backend, ev.config)
    known = ev.memo.recall(key, Stage.VERIFY, time.monotonic() - start)
    if known is not None:
        return known
    deadline = time.monotonic() + ev.config.verify_timeout
    phases = Phases(start)
    phases.mark("prechecks")
    reply: Verified | None = None
    candidate_from: float | None = None  # when the candidate's own time began (after the harness's waits)
    kinds: tuple[str, ...] = ()
    plan: list[tuple[int, str]] = []
    try:
        kinds = ev.input_verdict(deadline).kinds
        phases.mark("input_verdict")
        with candidate_stage(serving_stage(ev, workspace, compiled, deadline, refill=True)) as stage:
            phases.mark("reference")
            with ev._memory_slot(deadline):
                phases.mark("memory_slot")
                if stage.start():
                    with ev._shared_slot("calibration", deadline):
                        calibrated = stage.calibrate()
                    candidate_from = time.monotonic() if calibrated else None
                    phases.mark("candidate_start")
                    if calibrated and stage.await_ready():
                        phases.mark("candidate_load")
                        plan = [(secrets.randbits(62), kinds[i % len(kinds)]) for i in range(ev.config.num_checks)]
                        with ev._shared_slot("check", deadline):
                            reply = stage.verify(
                                plan,
                                ev.config.check_determinism,
                                ev.atol,
                                ev.rtol,
                                ev.policy.precision_mode(ev.task.metadata.dtype),
                            )
                phases.mark("checks")
                finished, code = stage.finish()
                phases.mark("candidate_exit")
            child = stage.child
            status, message, sig = classify(child, finished, code, ev.config.verify_timeout, stage.silent)
            shortage = faults.machine_shortage(ev, status, message)
            if shortage is not None:
                status, message = Status.HARNESS_ERROR, shortage
    except RuntimeError as exc:
        return harness_failure(VerifyResult, Stage.VERIFY, exc, start)
    stderr = candidate_output(child, workspace, ev.config.output_chars)
    own_failure = status not in (Status.OK, Status.HARNESS_ERROR)  # the machine's shortage is no fault of the code
    fault = faults.cuda_fault(ev, workspace, compiled, child, stderr) if own_failure else None
    checks, findings = verify_outcome(reply, ev.policy, ev.config.check_determinism)
    if checks:  # the precision policy, and whether every check met its float64 bound
        ratios = [c.precision_ratio for c in checks]
        detail = ev.policy.precision_detail(ev.task.metadata.dtype, ratios)
        findings.append(IntegrityFinding("precision", all((r or 0.0) <= 1.0 for r in ratios), detail))
    failed = next((c for c in checks if not c.passed), None)
    broken = runtime.first_failure(findings)
    if status is Status.OK and failed is not None:
        status = Status.INVALID_OUTPUT if failed.problem and failed.max_abs_error is None else Status.MISMATCH
        which = (
            f"check {failed.index + 1} of {ev.config.num_checks} ({KIND_NAMES.get(plan[failed.index][1], '?')})"
            if failed.index < min(ev.config.num_checks, len(plan))
            else "the repeat of check 1 (same inputs again)"
        )
        message = f"Output mismatch on {which}: {describe_check(failed)}"
    elif status is Status.OK and broken is not None:
        status = Status.INTEGRITY
        message = f"Integrity check '{broken.check}' failed: {broken.detail}"
    elif status is Status.OK:
        message = (
            f"All {ev.config.num_checks} checks passed (inputs: {', '.join(kinds)}; atol={ev.atol:g}, rtol={ev.rtol:g})"
        ) + ("; the repeat of check 1 gave bitwise the same output." if ev.config.check_determinism else ".")
    result = VerifyResult(
        stage=Stage.VERIFY,
        status=status,
        message=message,
        seconds=time.monotonic() - start,
        checks=tuple(checks),
        atol=ev.atol,
        rtol=ev.rtol,
        input_kinds=kinds,
        stderr=stderr,
        signal=sig,
        fault=fault,
        integrity=tuple(findings),
        phases=phases.items(),
    )
    own = deadline - candidate_from if candidate_from is not None else None
    ev.memo.remember(key, result, candidate_seconds=own, timeout=ev.config.verify_timeout)
    logger.info("verify %s: %s in %.1f s", ev.task.id, status.value, result.seconds)
    return result


def describe_check(check: CheckResult) -> str:
    """One line for the agent: what was wrong and where (never the whole reference output)."""
    if check.problem and check.max_abs_error is None:
        return check.problem
    where = f" at index {list(check.worst_index)}" if check.worst_index is not None else ""
    which = f"output {check.output}: " if check.output else ""  # a later output of a tuple (the first goes unnamed)
    parts = [
        f"{which}{check.mismatched} of {check.total} elements outside tolerance",
        f"max abs error {check.max_abs_error:.4g}{where} (expected {check.expected:.6g}, got {check.actual:.6g})",
    ]
    if check.problem:
        parts.append(check.problem)
    return "; ".join(parts)
