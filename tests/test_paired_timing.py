"""Interleaved candidate/eager timing (cudagym/paired_timing.py), with scripted rounds instead of processes."""

from __future__ import annotations

import pytest

from cudagym.harness.timing import TimingConfig
from cudagym.paired_timing import interleave, round_configs


def test_rounds_share_one_timings_repetitions_and_only_the_first_warms_up_by_time() -> None:
    timing = TimingConfig(warmup=3, warmup_seconds=0.25, min_reps=10, max_reps=200, budget_seconds=1.0)
    candidate, eager = round_configs(timing, 5)
    assert len(candidate) == len(eager) == 5
    assert sum(c.max_reps for c in candidate) + sum(e.max_reps for e in eager) == 200
    assert sum(c.budget_seconds for c in candidate + eager) == pytest.approx(1.0)
    assert candidate[0].warmup_seconds == 0.25 and candidate[0].warmup == 3
    assert eager[0].warmup_seconds == 0.0 and eager[0].warmup == 3
    assert all(r.warmup == 1 and r.warmup_seconds == 0.0 for r in candidate[1:] + eager[1:])
    with pytest.raises(ValueError):
        round_configs(timing, 0)


def test_drift_shared_by_both_sides_cancels_in_the_speedup() -> None:
    drift = iter([1.0, 1.0, 1.06, 1.06, 0.97, 0.97, 1.03, 1.03])  # the device's state, per round and side
    lasts: list[bool] = []

    def candidate(timing: TimingConfig, last: bool) -> list[float]:
        lasts.append(last)
        return [1.0 * next(drift)] * timing.max_reps

    def eager(timing: TimingConfig) -> list[float]:
        return [2.0 * next(drift)] * timing.max_reps

    pair = interleave(candidate, eager, TimingConfig(max_reps=80), 4)
    assert pair is not None
    assert pair.speedup_eager == pytest.approx(2.0)
    assert pair.round_ratios == pytest.approx((2.0,) * 4)
    assert pair.eager_ms == pytest.approx(pair.candidate_ms * 2.0)
    assert lasts == [False, False, False, True]  # the breakdown is asked for once, after the last round
    assert pair.reps == 40 and pair.rounds == 4


def test_one_round_straddling_a_move_does_not_shift_the_speedup() -> None:
    eager_times = iter([2.0, 2.0, 2.3, 2.0, 2.0])  # eager's third round lands after a 15% move

    def candidate(timing: TimingConfig, last: bool) -> list[float]:
        return [1.0] * timing.max_reps

    def eager(timing: TimingConfig) -> list[float]:
        return [next(eager_times)] * timing.max_reps

    pair = interleave(candidate, eager, TimingConfig(), 5)
    assert pair is not None
    assert pair.speedup_eager == pytest.approx(2.0)
    assert pair.eager_median_ms == pytest.approx(2.0)


def test_a_failed_candidate_round_ends_the_timing() -> None:
    calls: list[str] = []

    def candidate(timing: TimingConfig, last: bool) -> list[float] | None:
        calls.append("candidate")
        return None if len(calls) > 2 else [1.0]

    def eager(timing: TimingConfig) -> list[float]:
        calls.append("eager")
        return [1.0]

    assert interleave(candidate, eager, TimingConfig(), 4) is None
    assert calls == ["candidate", "eager", "candidate"]


def test_an_empty_eager_round_is_an_error_not_a_speedup() -> None:
    with pytest.raises(RuntimeError, match="no repetitions"):
        interleave(lambda timing, last: [1.0], lambda timing: [], TimingConfig(), 2)
