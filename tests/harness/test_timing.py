"""The one timing method (cudagym/harness/timing.py): its warm-up, the garbage collector kept out, and the
CUDA repetition's arithmetic (the GPU part is in tests/gpu/test_gpu_timing.py)."""

from __future__ import annotations

import dataclasses
import gc
import time
from pathlib import Path

import pytest

from cudagym import baseline_cache
from cudagym.backends import resolve_backend
from cudagym.baseline_cache import BaselineCache
from cudagym.harness import timing
from cudagym.harness.timing import TimingConfig, load_hold, net_time, settled, time_callable, warm_up
from cudagym.tasks import load


def test_settled_compares_the_last_window_with_the_one_before() -> None:
    assert not settled([1.0] * 9, 0.02)  # two windows of five are needed
    assert settled([1.3, 1.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.01, 1.0, 1.0, 1.0], 0.02)
    assert not settled([1.3, 1.25, 1.2, 1.15, 1.1, 1.05, 1.0, 1.0, 1.0, 1.0], 0.02)  # still coming down


def test_warm_up_goes_on_until_the_clocks_settle() -> None:
    ramp = iter([2.0, 1.8, 1.6, 1.4, 1.2, 1.1, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0] + [1.0] * 100)
    config = TimingConfig(warmup=3, warmup_seconds=0.0, warmup_max_seconds=10.0)
    times = warm_up(lambda: next(ramp), config, until_settled=True)
    assert settled(times, config.settle) and not settled(times[:-1], config.settle)
    assert 10 <= len(times) < 20
    assert len(warm_up(lambda: 1.0, config, until_settled=False)) == 3  # count and time only


def test_warm_up_stops_at_its_limit_when_the_time_never_settles() -> None:
    swing = iter([1.0, 2.0] * 10_000)  # medians of successive windows of five alternate between 1 and 2
    config = TimingConfig(warmup=1, warmup_seconds=0.0, warmup_max_seconds=0.05)

    def once() -> float:
        time.sleep(0.001)
        return next(swing)

    start = time.perf_counter()
    times = warm_up(once, config, until_settled=True)
    assert 0.05 <= time.perf_counter() - start < 1.0
    assert not settled(times, config.settle)


def test_cpu_timing_warms_up_by_count_and_time_only() -> None:
    config = TimingConfig(warmup=2, warmup_seconds=0.0, warmup_max_seconds=30.0, min_reps=3, max_reps=3)
    start = time.perf_counter()
    stats = time_callable(lambda: time.sleep(0.001), "cpu", config)
    assert stats.reps == 3 and time.perf_counter() - start < 5.0


def test_the_garbage_collector_is_off_while_timing_and_restored_after() -> None:
    states: list[bool] = []
    stats = time_callable(lambda: states.append(gc.isenabled()), "cpu", TimingConfig(warmup=1, min_reps=3))
    assert stats.reps >= 3 and states and not any(states)  # off in every warm-up and timed call
    assert gc.isenabled()
    gc.disable()
    try:
        time_callable(lambda: None, "cpu", TimingConfig(warmup=1, min_reps=3, budget_seconds=0.0))
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_a_cuda_repetition_takes_the_host_latency_off_but_never_below_its_own_stream() -> None:
    assert net_time(own_ms=0.010, full_ms=0.024, latency_ms=0.012) == 0.012  # 2 us of the tail stay: not the host's
    assert net_time(own_ms=0.010, full_ms=0.020, latency_ms=0.015) == 0.010  # a slow probe cannot go below own
    # a call that leaves 3 ms of work on another stream: its own stream says 0.01 ms, the full interval counts it
    assert net_time(own_ms=0.010, full_ms=3.025, latency_ms=0.012) == 3.013


def test_the_hold_is_off_without_its_library_and_the_method_is_revised_in_the_baselines_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert load_hold(TimingConfig(), "cuda") is None  # the evaluator fills gpu_library in
    assert load_hold(TimingConfig(hold_us=0, gpu_library="/nonexistent.so"), "cuda") is None
    assert TimingConfig().hold_us > 0  # on by default wherever the library is built
    task = load("builtin")[0]
    cache = BaselineCache(tmp_path, resolve_backend("cpu"), "2.13.0", TimingConfig())
    key = cache.key(task)
    monkeypatch.setattr(baseline_cache, "METHOD_REVISION", timing.METHOD_REVISION + 1)
    assert cache.key(task) != key  # baselines timed the old way are not reused


def test_the_median_is_known_once_its_confidence_interval_is_narrow_enough() -> None:
    assert not timing.median_known([1.0] * 4, 0.01)  # too few
    assert not timing.median_known([1.0] * 50, 0.0)  # 0: never
    assert timing.median_known([1.0, 1.001, 0.999, 1.002, 0.998], 0.005)
    # the interval of a median of 20 lies between the 6th and 15th smallest: outliers beyond it do not matter
    tight = [1.0 + i / 1000 for i in range(10)] + [0.5, 0.6, 0.7, 0.8, 0.9] + [2.0, 3.0, 4.0, 5.0, 6.0]
    assert timing.median_known(tight, 0.005) and not timing.median_known(tight, 0.001)
    wide = [1.0 + i / 100 for i in range(20)]
    assert not timing.median_known(wide, 0.02) and timing.median_known(wide, 0.06)


def test_cpu_timing_stops_once_the_median_is_known() -> None:
    config = TimingConfig(warmup=1, warmup_seconds=0.0, min_reps=5, max_reps=100_000, budget_seconds=30.0)
    start = time.perf_counter()
    stats = time_callable(lambda: sum(range(20_000)), "cpu", dataclasses.replace(config, median_within=0.05))
    assert stats.reps < 1_000 and time.perf_counter() - start < 25.0, stats.reps
