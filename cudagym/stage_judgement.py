"""Judgements the evaluator makes on what the trusted side reported: checks and integrity findings of a
verification or a timing, and whether a profile's baselines can be trusted (``judge_baselines``).

The numbers here all come from the reference process (``harness/stages.py``); the candidate's own observations
(operators it dispatched, threads, replaced functions, its kernel breakdown) arrive through it and are its word.
"""

from __future__ import annotations

import dataclasses
import statistics

from cudagym.harness.protocol import Check, Observation, Samples, Timed, Verified
from cudagym.integrity import runtime
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.results import CheckResult, IntegrityFinding, StageResult, Status


def check_result(check: Check) -> CheckResult:
    """The result of one check as the evaluator reports it (the reference's ``Check`` without the findings it
    carries: determinism and unchanged inputs become integrity findings)."""
    return CheckResult(**{field.name: getattr(check, field.name) for field in dataclasses.fields(CheckResult)})


def observed_findings(
    observed: Observation, policy: IntegrityPolicy, sampled: Samples | None
) -> list[IntegrityFinding]:
    """The findings on what the candidate said about its calls (every call of the stage), and on where the kernel
    saw its threads run (cpu)."""
    return [
        runtime.sampled_own_code(sampled, policy),
        runtime.no_aliasing(observed.aliases_input),
        runtime.trusted_functions(observed.replaced),
        runtime.no_threads(observed.threads_started),
        runtime.torch_compute(observed.ops, policy),
    ]


def verify_outcome(
    reply: Verified | None, policy: IntegrityPolicy, repeat: bool
) -> tuple[list[CheckResult], list[IntegrityFinding]]:
    """The checks a verification ran and its integrity findings (none when it did not run)."""
    if reply is None:
        return [], []
    checks = [check_result(c) for c in reply.checks]
    findings = observed_findings(reply.observed, policy, reply.sampled)
    changed = [i for i, c in enumerate(reply.checks) if c.inputs_unchanged is False]
    findings.insert(0, runtime.inputs_unchanged(not changed, changed or None))
    if repeat and reply.checks and reply.checks[-1].deterministic is not None:
        findings.append(runtime.deterministic(reply.checks[-1].deterministic))
    return checks, findings


def timing_findings(reply: Timed, policy: IntegrityPolicy) -> list[IntegrityFinding]:
    """The findings of a timing's checked calls and of the candidate's observations over every call."""
    unchanged = reply.failure is None or reply.failure.inputs_unchanged is not False
    findings = [runtime.inputs_unchanged(unchanged, None)]
    return findings + observed_findings(reply.observed, policy, reply.sampled)


@dataclasses.dataclass(frozen=True)
class BaselineVerdict:
    """Which eager (and torch.compile) time a profile compares with, and why.

    Attributes:
        eager_ms, compile_ms: the times the speedups use.
        fair: the conditions were quiet enough for the figures to be trusted (else the speedups are the
            conservative ones, and the result says so).
        retime: the cached baselines disagreed with eager timed beside the candidate by more than the noise, in
            the direction of a cache measured under load: time them again now.
        detail: one line for the observation and ``info``.
    """

    eager_ms: float
    compile_ms: float | None
    fair: bool
    retime: bool
    detail: str


MIN_TOLERANCE = {True: 0.03, False: 0.10}  # cuda, cpu: below this a difference is never called a disagreement


def spread(values: list[float]) -> float:
    """Interquartile range over median (0 for fewer than 4 values)."""
    if len(values) < 4:
        return 0.0
    q = statistics.quantiles(values, n=4)
    middle = statistics.median(values)
    return (q[2] - q[0]) / middle if middle > 0 else 0.0


def judge_baselines(
    cached_eager: float,
    cached_compile: float | None,
    cached_spread: float,
    fresh_eager: list[float],
    *,
    cuda: bool,
    clock_slowed: bool,
) -> BaselineVerdict:
    """Compares the cached eager time with eager timed beside the candidate (``fresh_eager``, each a median of a few
    calls), with a tolerance of the noise both show (at least ``MIN_TOLERANCE``).

    * fresh clearly faster: the cache was measured on a busy machine; time the baselines again (``retime``).
    * fresh clearly slower, or the clock's own work slowed down during the timing: the machine is busy now. On cuda
      the cached (quiet) times are used: a candidate could have slowed eager by running work of its own beside it,
      so a slower fresh eager is never taken. On cpu the candidate was frozen while eager ran, so eager beside it
      is what it was compared under: the fresh eager time is used, torch.compile's scaled alike. Either way the
      profile is marked as not fair.
    * otherwise the cached times."""
    if not fresh_eager:
        return BaselineVerdict(cached_eager, cached_compile, not clock_slowed, False, "eager not re-validated")
    fresh = statistics.median(fresh_eager)
    tolerance = max(MIN_TOLERANCE[cuda], 2.0 * (spread(fresh_eager) + cached_spread))
    ratio = fresh / cached_eager if cached_eager > 0 else 1.0
    said = f"eager beside the candidate {fresh:.4g} ms vs cached {cached_eager:.4g} ms"
    if ratio < 1 - tolerance:
        return BaselineVerdict(
            cached_eager, cached_compile, not clock_slowed, True, f"{said}: the cache was timed on a busy machine"
        )
    if ratio > 1 + tolerance or clock_slowed:
        why = "the device was busy during the timing" if clock_slowed and ratio <= 1 + tolerance else "busy now"
        if cuda:
            return BaselineVerdict(cached_eager, cached_compile, False, False, f"{said}: {why}; cached times used")
        scaled = cached_compile * ratio if cached_compile is not None else None
        return BaselineVerdict(fresh, scaled, False, False, f"{said}: {why}; eager beside the candidate used")
    return BaselineVerdict(cached_eager, cached_compile, True, False, f"{said}: agree")


def miscalibrated(result: StageResult) -> bool:
    """Whether ``result`` is a profile refused by :func:`calibration_problem` (its clock calibrated beside other work
    on the device): nothing is wrong with the candidate or the evaluator, and profiling again may well succeed."""
    clock = getattr(result, "clock", None) or {}
    quickened, handshakes = clock.get("clock_quickened") or 0, clock.get("handshakes") or 0
    return result.status is Status.HARNESS_ERROR and _quickened_too_often(quickened, handshakes)


def _quickened_too_often(quickened: int, handshakes: int) -> bool:
    """A quarter of the timed handshakes or more ran the clock's own work clearly faster than calibrated."""
    return quickened * 4 > max(1, handshakes)


def calibration_problem(reply: Timed) -> str | None:
    """Why a timing's figure cannot be trusted because of the clock's calibration, or None. On cuda, when the clock's
    own phases ran clearly faster during a quarter of the timed handshakes than while it calibrated, the calibration
    was taken beside other work on the device and takes off more than a handshake costs now: the candidate would
    read faster than it is. (A calibration with no steady round only makes the profile not fair: the round kept
    takes off least, which can only make the candidate read slower.)"""
    quickened = reply.clock_quickened
    if _quickened_too_often(quickened, reply.handshakes):
        return (
            "The device was busy while the trusted clock calibrated (its own work ran faster during "
            f"{quickened} of {reply.handshakes} timed handshakes): no figure is trusted; profile again."
        )
    return None
