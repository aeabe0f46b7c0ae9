"""One timing method for candidate, eager and torch.compile alike. Runs inside child processes.

CPU: ``time.perf_counter`` around each call. CUDA: events around each call, bracketed by a full device
synchronisation (so work on any stream counts), with the L2 cache flushed before every repetition.
Both: warm-up until a count and a time are both reached (on CUDA also until the calls' time has settled, within
a limit), then repetitions until a count and a time budget are met; the statistic is the median.
Kept free of cudagym imports so the child needs only torch.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass(frozen=True)
class TimingConfig:
    """How many repetitions to run and for how long (a repetition count and a time budget)."""

    warmup: int = 3
    # warm-up runs until both this count and this time are reached, meant to keep an idle GPU's clock ramp
    # out of the timed repetitions (docs/benchmarks.md, repeatability)
    warmup_seconds: float = 0.25
    # cuda: then on until the calls' time settles (the median of the last five within ``settle`` of the five
    # before), for at most ``warmup_max_seconds`` in all: after an idle spell the H200's clocks took longer
    # than 0.25 s to come up (the first profile of a softmax ran 5-7% slower than the next four)
    warmup_max_seconds: float = 1.0
    settle: float = 0.02
    min_reps: int = 10
    max_reps: int = 200
    budget_seconds: float = 1.0
    flush_l2: bool = True
    l2_flush_bytes: int = 256 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class TimingStats:
    """Per-repetition times in milliseconds and their summary."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    reps: int
    method: str
    times_ms: tuple[float, ...] = ()  # every repetition, in order (interleaved timing merges rounds from them)

    @property
    def spread(self) -> float:
        return (self.p75_ms - self.p25_ms) / self.median_ms if self.median_ms > 0 else 0.0


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(times_ms: list[float], method: str) -> TimingStats:
    return TimingStats(
        median_ms=statistics.median(times_ms),
        p25_ms=_quantile(times_ms, 0.25),
        p75_ms=_quantile(times_ms, 0.75),
        min_ms=min(times_ms),
        reps=len(times_ms),
        method=method,
        times_ms=tuple(times_ms),
    )


def settled(times: list[float], tolerance: float, window: int = 5) -> bool:
    """Whether the median of the last ``window`` times is within ``tolerance`` of the median of the window
    before it (the warm-up's test that the device's clocks have come up)."""
    if len(times) < 2 * window:
        return False
    before = statistics.median(times[-2 * window : -window])
    return abs(statistics.median(times[-window:]) - before) <= tolerance * before


def warm_up(once: Callable[[], float], config: TimingConfig, *, until_settled: bool) -> list[float]:
    """Calls ``once`` (which returns the call's seconds) until ``config.warmup`` calls and
    ``config.warmup_seconds`` are both reached and, ``until_settled``, the times have settled or
    ``config.warmup_max_seconds`` have passed; returns the warm-up calls' times."""
    start = time.perf_counter()
    times: list[float] = []
    while True:
        elapsed = time.perf_counter() - start
        if len(times) >= config.warmup and elapsed >= config.warmup_seconds:
            if not until_settled or elapsed >= config.warmup_max_seconds or settled(times, config.settle):
                return times
        times.append(once())


def time_callable(
    fn: Callable[[], Any],
    device: str,
    config: TimingConfig,
    before_each: Callable[[], None] | None = None,
) -> TimingStats:
    """Times ``fn()`` on ``device`` ("cpu" or "cuda[:i]"). ``before_each`` runs untimed before every
    repetition (e.g. to write fresh inputs into the buffers). Python's garbage collector is off meanwhile, as in
    ``timeit``: a full collection of a heap that holds torch takes milliseconds, which would land in whichever
    repetition it interrupted."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _time_callable(fn, device, config, before_each)
    finally:
        if collecting:
            gc.enable()


def _time_callable(
    fn: Callable[[], Any], device: str, config: TimingConfig, before_each: Callable[[], None] | None
) -> TimingStats:
    import torch

    is_cuda = device.startswith("cuda")
    flush_buffer = None
    if is_cuda and config.flush_l2:
        flush_buffer = torch.empty(config.l2_flush_bytes // 4, dtype=torch.int32, device=device)

    def prepare() -> None:
        if before_each is not None:
            before_each()
        if flush_buffer is not None:
            flush_buffer.fill_(0)  # evicts the inputs from L2
        if is_cuda:
            torch.cuda.synchronize(device)

    def once() -> float:
        prepare()
        t0 = time.perf_counter()
        fn()
        if is_cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    warm_up(once, config, until_settled=is_cuda)

    times: list[float] = []
    start_all = time.perf_counter()
    if is_cuda:
        start_evt = torch.cuda.Event(enable_timing=True)
        end_evt = torch.cuda.Event(enable_timing=True)
    while len(times) < config.max_reps:
        prepare()
        if is_cuda:
            start_evt.record()
            fn()
            torch.cuda.synchronize(device)  # all streams: work launched elsewhere is waited for
            end_evt.record()
            end_evt.synchronize()
            times.append(start_evt.elapsed_time(end_evt))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= config.min_reps and time.perf_counter() - start_all >= config.budget_seconds:
            break
    method = "cuda events around a full device sync, L2 flushed, median" if is_cuda else "perf_counter per call, median"
    return summarize(times, f"{method} of {len(times)}")
