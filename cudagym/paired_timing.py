"""Timing a candidate and eager PyTorch interleaved, so that the device's drift cancels in their ratio.

On the H200 a 1 ms memory-bound kernel's time moves by 2-6% between blocks of repetitions a fraction of a second
apart, in one process on the same buffers (``benchmarks/timing_variance.py``; docs/benchmarks.md). A candidate
timed in one block and its eager baseline in another (cached from an earlier call, or timed right after it) can
land on different sides of such a move, and the speedup moves with it. Timed in short alternating rounds inside
one timing slot (candidate, eager, candidate, eager, ...), both see the same conditions; the speedup is the median
of the per-round ratios, so one round that straddles a move does not shift it.

Each side keeps its own process: the candidate times ModelNew in its sandbox, the trusted reference process times
eager PyTorch (a candidate must never time the baseline it is compared with). ``interleave`` only orders the
rounds and combines what they return; the callers do the talking (``LocalEvaluator.profile``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

from cudagym.harness.timing import TimingConfig, summarize

# candidate: (round settings, whether this is the last round) -> its repetitions in ms, or None when it failed
TimeCandidate = Callable[[TimingConfig, bool], Sequence[float] | None]
TimeEager = Callable[[TimingConfig], Sequence[float]]  # round settings -> eager's repetitions in ms


@dataclasses.dataclass(frozen=True)
class PairedTiming:
    """What an interleaved timing measured."""

    candidate_ms: float  # median over every candidate repetition
    speedup_eager: float  # median over rounds of (eager's median / the candidate's median) in that round
    eager_median_ms: float  # median over every eager repetition (for the record; the speedup uses the rounds)
    rounds: int
    reps: int  # candidate repetitions, all rounds
    spread: float  # the candidate's interquartile range over its median, all repetitions
    round_ratios: tuple[float, ...]

    @property
    def eager_ms(self) -> float:
        """Eager's time under the candidate's conditions: the candidate's time times the paired speedup."""
        return self.candidate_ms * self.speedup_eager


def round_configs(timing: TimingConfig, rounds: int) -> tuple[list[TimingConfig], list[TimingConfig]]:
    """Per-round settings of the candidate and of eager. The repetitions and the time budget of one timing are
    shared out over the rounds of both sides, so an interleaved timing costs about what the candidate's timing
    alone did. The candidate's first round keeps the full warm-up (an idle GPU's clock ramp); eager's first round
    follows it on a busy device and warms up by count only; later rounds run one untimed call each."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    share = 2 * rounds
    base = dataclasses.replace(
        timing,
        min_reps=max(1, math.ceil(timing.min_reps / share)),
        max_reps=max(2, math.ceil(timing.max_reps / share)),
        budget_seconds=timing.budget_seconds / share,
    )
    later = dataclasses.replace(base, warmup=1, warmup_seconds=0.0, warmup_max_seconds=0.0)
    candidate = [base] + [later] * (rounds - 1)
    eager = [dataclasses.replace(base, warmup_seconds=0.0, warmup_max_seconds=0.0)] + [later] * (rounds - 1)
    return candidate, eager


def interleave(
    time_candidate: TimeCandidate, time_eager: TimeEager, timing: TimingConfig, rounds: int
) -> PairedTiming | None:
    """Alternates ``rounds`` candidate and eager rounds; None as soon as a candidate round fails."""
    candidate_rounds, eager_rounds = round_configs(timing, rounds)
    every_candidate: list[float] = []
    every_eager: list[float] = []
    ratios: list[float] = []
    for index, (mine, theirs) in enumerate(zip(candidate_rounds, eager_rounds, strict=True)):
        candidate = time_candidate(mine, index == rounds - 1)
        if not candidate:
            return None
        eager = time_eager(theirs)
        if not eager:
            raise RuntimeError("the eager round returned no repetitions")
        every_candidate += candidate
        every_eager += eager
        ratios.append(statistics.median(eager) / statistics.median(candidate))
    stats = summarize(every_candidate, "interleaved")
    return PairedTiming(
        candidate_ms=stats.median_ms,
        speedup_eager=statistics.median(ratios),
        eager_median_ms=statistics.median(every_eager),
        rounds=rounds,
        reps=stats.reps,
        spread=stats.spread,
        round_ratios=tuple(ratios),
    )
