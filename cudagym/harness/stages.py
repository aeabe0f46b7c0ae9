"""Verification and timing of a candidate through the trusted clock (``clock.py``), run in the reference process.

Both are sequences of handshakes that look alike to the candidate. **Verification**: one call per handshake, each on a
fresh input set from a secret seed, every output compared in full; optionally the first set once more, whose output must
be bitwise the same. **Timing**: warm-up handshakes, then timed ones of ``calls`` calls each (more calls per handshake
when a call is short, so the handshake's own cost, calibrated and taken off, and its noise weigh less:
``Timing._calls_per_handshake``), every call on a fresh input set. **Every call of every timed handshake is compared
in full** like a verification check, so the median is made of handshakes whose every output was right: a candidate
that skips, caches or finishes late on any call the median takes fails, whatever share of its calls it cheats on and
however it picks them. Warm-up handshakes, which only size the timed ones, have a random share of their calls
(``WARM_UP_CHECK_SHARE``, drawn after the call) compared. Between handshakes eager PyTorch is timed a few times on fresh
inputs, the same trusted way as the cached baseline (``timing.py``), so the evaluator can tell a stale baseline from a
busy machine.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import statistics
import time
from typing import Any

from .clock import Clock, Handshake
from .compare import same_values
from .cputime import Spent
from .protocol import CalibrationEntry, Check, ErrorReport, Observation, RunTime, Timed, Verified
from .timing import TimingConfig, enough, summarize, time_callable, warm_up

WARM_UP_CHECK_SHARE = 0.25  # of the warm-up calls, compared in full (every timed call is)
# calls per handshake: enough for the work of a handshake to reach this (cuda, cpu) unless ``TimingConfig.handshake_us``
# says otherwise, so that the handshake's own cost, calibrated and taken off, and its noise weigh little per call (on
# cuda a handshake's round trip of two context switches is ~0.3 ms with noise of tens of microseconds)
TARGET_HANDSHAKE_US = {True: 2000.0, False: 5000.0}
EAGER_EVERY = 8  # timed handshakes between two eager re-validations
EAGER_SAMPLES = 5  # eager re-validations at least


@dataclasses.dataclass
class Observed:
    """What the candidate said about its calls (its word), gathered over a stage."""

    ops: set[str] = dataclasses.field(default_factory=set)
    replaced: set[str] = dataclasses.field(default_factory=set)
    threads_started: int = 0
    aliased: bool = False

    def add(self, record: Handshake) -> None:
        description = record.description
        self.ops.update(str(op) for op in description.get("ops", []) if isinstance(op, str))
        self.replaced.update(str(name) for name in description.get("replaced", []) if isinstance(name, str))
        threads = description.get("threads_started", 0)
        self.threads_started = max(self.threads_started, threads if isinstance(threads, int) else 0)
        for call in description.get("calls", []) if isinstance(description.get("calls"), list) else []:
            items = call.get("items", []) if isinstance(call, dict) else []
            self.aliased |= any(isinstance(i, dict) and i.get("aliases_input") for i in items)

    def message(self) -> Observation:
        return Observation(sorted(self.ops), sorted(self.replaced), self.threads_started, self.aliased)


def verify(
    clock: Clock,
    plan: list[tuple[int, str]],
    repeat_first: bool,
    atol: float,
    rtol: float,
    deadline: float,
    precision: str = "off",
) -> Verified:
    """Runs one handshake per ``(seed, kind)`` of ``plan`` (and the first seed again with ``repeat_first``), each
    output compared (``precision``: see ``Clock.check``); stops at the first failed check or a failed call. Returns the
    checks and what was observed."""
    checks: list[Check] = []
    observed = Observed()
    kept: list[Any] | None = None
    steps = [*plan, plan[0]] if repeat_first else list(plan)
    for index, (seed, kind) in enumerate(steps):
        clock.stage_inputs(0, seed, kind)
        record = clock.handshake([0], deadline)
        observed.add(record)
        if record.error is not None:
            return Verified(checks, ErrorReport.from_candidate(record.error), observed.message())
        check = clock.check(record, 0, atol, rtol, index, precision)
        if repeat_first and index == 0:
            kept = clock.keep(record, 0)
        if repeat_first and index == len(steps) - 1 and check.passed:
            again = clock.keep(record, 0)
            same = kept is not None and len(again) == len(kept) and all(map(same_values, kept, again))
            check = dataclasses.replace(check, deterministic=same)
        clock.poison(record)
        checks.append(check)
        if not check.passed:
            break
    return Verified(checks, None, observed.message(), clock.sampled())


class Timing:
    """One timing of a candidate (see the module docstring)."""

    def __init__(
        self,
        clock: Clock,
        config: TimingConfig,
        eager: Any,
        atol: float,
        rtol: float,
        deadline: float,
        precision: str = "off",
    ):
        self.clock, self.config, self.eager = clock, config, eager
        self.atol, self.rtol, self.deadline, self.precision = atol, rtol, deadline, precision
        self.observed = Observed()
        self.checked = 0
        self.failure: Check | None = None
        self.error: ErrorReport | None = None
        self.eager_ms: list[float] = []
        self.phases: list[list[float]] = []  # of the timed handshakes, per phase (microseconds)
        self.ran: list[Spent] = []  # cpu: the run time of each timed handshake
        self.slowed = 0
        self.quickened = 0  # cuda: timed handshakes whose clock phases were clearly shorter than calibrated
        self.handshakes = 0
        self.queued = 0  # cuda: timed handshakes whose calls the candidate had queued before the go
        self.warmup_s = 0.0
        self.checks_s = 0.0
        self.eager_s = 0.0

    def _one(self, calls: int, *, check_all: bool) -> list[float] | None:
        """One handshake of ``calls`` calls on fresh inputs, every call compared (``check_all``) or a random share;
        its per-call time, or None when the stage has failed."""
        clock = self.clock
        for k in range(calls):
            clock.stage_inputs(k, secrets.randbits(62), "task")
        record = clock.handshake(list(range(calls)), self.deadline)
        self.handshakes += 1
        self.observed.add(record)
        if record.error is not None:
            self.error = ErrorReport.from_candidate(record.error)
            return None
        for k in range(calls):
            if check_all or secrets.randbelow(1_000_000) < WARM_UP_CHECK_SHARE * 1_000_000:
                began = time.perf_counter()
                check = clock.check(record, k, self.atol, self.rtol, self.checked, self.precision)
                self.checks_s += time.perf_counter() - began
                self.checked += 1
                if not check.passed or check.inputs_unchanged is False:
                    self.failure = check
                    return None
        self.slowed += clock.clock_slowed(record)
        self.quickened += clock.clock_quickened(record)
        self.queued += record.queued
        self.phases.append(record.phases_us)
        if record.cpu is not None:
            self.ran.append(record.cpu)
        clock.poison(record)
        return [clock.per_call_us(record) / 1e3]

    def _eager_sample(self) -> None:
        """Eager PyTorch timed a few times on the fresh inputs of set 0, by the baselines' own method."""
        began = time.perf_counter()
        inputs = self.clock.staging[0]
        quick = dataclasses.replace(
            self.config,
            warmup=1,
            warmup_seconds=0.0,
            warmup_max_seconds=0.0,
            min_reps=3,
            max_reps=3,
            budget_seconds=0.0,
        )
        stats = time_callable(lambda: self.eager(*inputs), self.clock.device, quick)
        self.eager_ms.append(stats.median_ms)
        self.eager_s += time.perf_counter() - began

    def run(self) -> Timed:
        config = self.config
        times: list[float] = []

        def warm() -> float:
            got = self._one(1, check_all=False)
            if got is None:
                raise _Stop
            times.extend(got)
            return got[0] / 1e3

        try:
            began = time.perf_counter()
            warm_up(warm, config, until_settled=self.clock.cuda)
            self.warmup_s = time.perf_counter() - began
            calls = self._calls_per_handshake(statistics.median(times[-5:]))
            timed: list[float] = []
            start = time.perf_counter()
            while len(timed) < config.max_reps:
                got = self._one(calls, check_all=True)
                if got is None:
                    raise _Stop
                timed.extend(got)
                if len(timed) % EAGER_EVERY == 0 and self.eager is not None:
                    self._eager_sample()
                if enough(timed, config, start):
                    break
            while self.eager is not None and len(self.eager_ms) < EAGER_SAMPLES:
                self._eager_sample()
        except _Stop:
            return self._reply(None, 0)
        return self._reply(timed, calls)

    def _calls_per_handshake(self, one_call_ms: float) -> int:
        """The calls a timed handshake holds: as many as reach the handshake target (``TimingConfig.handshake_us``)
        at ``one_call_ms`` per call, a power of two the clock calibrated."""
        target = self.config.handshake_us
        if target is None:
            target = TARGET_HANDSHAKE_US[self.clock.cuda]
        wanted = math.ceil(target / max(one_call_ms * 1e3, 1e-3))
        return max(c for c in self.clock.call_counts() if c <= max(1, wanted))

    def _reply(self, timed: list[float] | None, calls: int) -> Timed:
        stats = summarize(timed, self._method(calls)) if timed else None
        calibration = self.clock.calibration
        return Timed(
            median_ms=stats.median_ms if stats else None,
            spread=stats.spread if stats else None,
            reps=stats.reps if stats else 0,
            times_ms=list(stats.times_ms) if stats else [],
            method=stats.method if stats else "",
            error=self.error,
            failure=self.failure,
            calls_per_handshake=calls,
            checked_calls=self.checked,
            handshakes=self.handshakes,
            clock_slowed=self.slowed,
            clock_quickened=self.quickened,
            calibration_disturbed=list(calibration.disturbed),
            queued_handshakes=self.queued,
            eager_ms=self.eager_ms,
            calibration={
                str(k): CalibrationEntry(
                    total_us=v,
                    phases_us=calibration.phases_us[k],
                    noise_us=calibration.noise_us.get(k, []),
                    resolution_us=calibration.resolution_us(k),
                )
                for k, v in calibration.total_us.items()
            },
            phases_us=[statistics.median(p[i] for p in self.phases) for i in range(len(self.phases[0]))]
            if self.phases
            else [],
            observed=self.observed.message(),
            sampled=self.clock.sampled(),
            run_time_us=RunTime(
                busiest_thread=statistics.median(r.busiest_us for r in self.ran),
                all_threads=statistics.median(r.total_us for r in self.ran),
                page_faults=statistics.median(r.faults for r in self.ran),
            )
            if self.ran
            else None,
            warmup_s=round(self.warmup_s, 4),
            checks_s=round(self.checks_s, 4),
            eager_s=round(self.eager_s, 4),
        )

    def _method(self, calls: int) -> str:
        where = (
            "cuda events on the reference's own stream around inputs written, L2 flushed, the candidate's calls "
            "(queued before its go) and their outputs sealed"
            if self.clock.cuda
            else self.clock.cpu_method
        )
        resolution = self.clock.calibration.resolution_us(calls) if calls else 0.0
        return (
            f"trusted clock: {where}; calibrated handshake cost taken off; {calls} call(s) per handshake, every "
            "output compared in full; "
            f"resolution {resolution:.1f} us per call (a faster call reads as that)"
        )


class _Stop(Exception):
    """The candidate failed a call or a check: the timing ends."""


def time_candidate(
    clock: Clock, config: TimingConfig, eager: Any, atol: float, rtol: float, deadline: float, precision: str = "off"
) -> Timed:
    """Times the candidate (see ``Timing``); ``eager`` is the reference model to re-validate the baseline with;
    ``precision``: see ``Clock.check``."""
    return Timing(clock, config, eager, atol, rtol, deadline, precision).run()
