"""One timing method for candidate, eager and torch.compile alike. Runs inside child processes.

CPU: ``time.perf_counter`` around each call. CUDA: events around each call, with the L2 cache flushed before every
repetition. The GPU is held busy before the start event (``gpulib.py``), so the host's path into the call is not
timed; the end event follows a full device synchronisation, so work on every stream is, and the host's own
return latency, measured right after by an empty synchronisation, is taken off again (``CudaRepetition``).
Both: warm-up until a count and a time are both reached (on CUDA also until the calls' time has settled, within
a limit), then repetitions until a count and a time budget are met; the statistic is the median.
Kept free of cudagym imports so the child needs only torch.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

# the way a repetition is measured, revised when it changes: baselines cached under another revision are not reused
# (2: the GPU hold before the start event and the host's return latency taken off; 3: probed after a GPU wait;
# 4: the host polls the call's stream before the device synchronisation; 5: as 2, since 3 and 4 spread wider on
# the H200, docs/benchmarks.md; 6: on cpu, the calling thread's run time instead of the wall time, as the trusted
# clock charges a cpu candidate its threads' run time: waits for a core on a busy host count for neither)
METHOD_REVISION = 6


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
    # past ``min_reps``, the timed repetitions stop before ``budget_seconds`` once their median is known within this
    # share of it at about 95% confidence (``median_known``): a steady kernel is not timed longer than its figure needs,
    # which frees the device's timing slot for other environments; 0: always the whole budget
    median_within: float = 0.005
    flush_l2: bool = True
    l2_flush_bytes: int = 256 * 1024 * 1024
    # cuda: the GPU is held busy this long before each start event (and, by the trusted clock, after each handshake's
    # go), with the kernel of the library at ``gpu_library`` (harness/gpulib.py; the evaluator builds it); 0 or no
    # library: the start event is recorded on an idle GPU
    hold_us: float = 100.0
    gpu_library: str = ""
    # trusted clock: the candidate's work one handshake aims to hold (microseconds; None: the backend's default, 2 ms
    # on cuda, 5 ms on cpu). A handshake holds as many calls as reach it (a power of two, up to the input sets the
    # clock can keep), so that the handshake's own calibrated cost and its noise weigh little per call; a value below
    # one call's time gives one call per handshake
    handshake_us: float | None = None


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
    # cuda: medians of the call's own stream alone (start to an event recorded as the call returns, a floor that
    # misses other streams) and of the host's return latency taken off each repetition
    stream_ms: float | None = None
    latency_ms: float | None = None

    @property
    def spread(self) -> float:
        return (self.p75_ms - self.p25_ms) / self.median_ms if self.median_ms > 0 else 0.0


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(
    times_ms: list[float], method: str, stream_ms: list[float] | None = None, latency_ms: list[float] | None = None
) -> TimingStats:
    return TimingStats(
        median_ms=statistics.median(times_ms),
        p25_ms=_quantile(times_ms, 0.25),
        p75_ms=_quantile(times_ms, 0.75),
        min_ms=min(times_ms),
        reps=len(times_ms),
        method=method,
        times_ms=tuple(times_ms),
        stream_ms=statistics.median(stream_ms) if stream_ms else None,
        latency_ms=statistics.median(latency_ms) if latency_ms else None,
    )


def settled(times: list[float], tolerance: float, window: int = 5) -> bool:
    """Whether the median of the last ``window`` times is within ``tolerance`` of the median of the window
    before it (the warm-up's test that the device's clocks have come up)."""
    if len(times) < 2 * window:
        return False
    before = statistics.median(times[-2 * window : -window])
    return abs(statistics.median(times[-window:]) - before) <= tolerance * before


def median_known(times: list[float], within: float, z: float = 1.96) -> bool:
    """Whether the median of ``times`` is known within ``within`` (a share of it): the distribution-free confidence
    interval of a median (between the order statistics n/2 - z*sqrt(n)/2 and n/2 + z*sqrt(n)/2; ``z`` 1.96 for about
    95%) is no wider than ``2 * within`` times the median. Never with fewer than five times or ``within`` 0."""
    n = len(times)
    if within <= 0 or n < 5:
        return False
    ordered = sorted(times)
    half = z * math.sqrt(n) / 2
    low, high = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    middle = statistics.median(ordered)
    return middle > 0 and ordered[high] - ordered[low] <= 2 * within * middle


def enough(times: list[float], config: TimingConfig, started: float) -> bool:
    """Whether a timing may stop: ``min_reps`` reached and either the budget spent or the median known closely enough
    (``TimingConfig.median_within``)."""
    if len(times) < config.min_reps:
        return False
    return time.perf_counter() - started >= config.budget_seconds or median_known(times, config.median_within)


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


def net_time(own_ms: float, full_ms: float, latency_ms: float) -> float:
    """A CUDA repetition's time: the full interval (all streams, and the host's return) less the host's return
    latency, but never less than the call's own stream took."""
    return max(own_ms, full_ms - latency_ms)


class CudaRepetition:
    """One timed CUDA repetition, measured from five events:

    ``hold`` (optional) | start | call | own-stream end | device synchronisation | end | probe-start |
    device synchronisation | probe-end

    The full interval (start to end) holds all the call's work on every stream, and the host's latency in
    noticing that the device is done and recording the end event; the probe measures that latency once more
    on an idle device, in the same moment of the host. A repetition's time is the full interval less the probe,
    never less than the call's own stream: work the call leaves running on another stream still counts (it
    lengthens the full interval and not the probe), while the host's latency, tens of microseconds that vary with
    the host's state, does not. (Two other probes spread wider on the H200: after a short GPU wait, and with the
    host polling the call's stream before synchronising; docs/benchmarks.md, seventh session.)"""

    def __init__(self, device: str, hold: Any = None, hold_us: float = 0.0) -> None:
        import torch

        self.torch, self.device, self.hold, self.hold_us = torch, device, hold, hold_us
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(5)]

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, float, float]:
        """Runs ``fn`` once (the caller has flushed and synchronised); returns (time, own stream, latency) in ms."""
        start, own_end, end, probe_start, probe_end = self.events
        sync = self.torch.cuda.synchronize
        if self.hold is not None:
            self.hold.launch(self.hold_us)
        start.record()
        fn()
        own_end.record()
        sync(self.device)  # all streams: work launched elsewhere is waited for
        end.record()
        probe_start.record()
        sync(self.device)
        probe_end.record()
        probe_end.synchronize()
        own = start.elapsed_time(own_end)
        latency = probe_start.elapsed_time(probe_end)
        return net_time(own, start.elapsed_time(end), latency), own, latency


_LIBRARIES: dict[tuple[str, str], Any] = {}  # the GPU libraries this process loaded, by (path, device)


def load_gpu_library(path: str, device: str) -> Any:
    """The GPU library at ``path`` (``gpulib.GpuLib``), loaded once per process and device."""
    key = (path, device)
    if key not in _LIBRARIES:
        from .gpulib import GpuLib

        _LIBRARIES[key] = GpuLib(path, device)
    return _LIBRARIES[key]


def load_hold(config: TimingConfig, device: str) -> Any:
    """The library whose kernel holds the GPU before each start event (None when the hold is off)."""
    if not config.gpu_library or config.hold_us <= 0:
        return None
    return load_gpu_library(config.gpu_library, device)


def _time_callable(
    fn: Callable[[], Any], device: str, config: TimingConfig, before_each: Callable[[], None] | None
) -> TimingStats:
    import torch

    is_cuda = device.startswith("cuda")
    flush_buffer = None
    if is_cuda and config.flush_l2:
        flush_buffer = torch.empty(config.l2_flush_bytes // 4, dtype=torch.int32, device=device)
    repetition = CudaRepetition(device, load_hold(config, device), config.hold_us) if is_cuda else None

    def measure() -> tuple[float, float, float]:
        """One repetition, prepared untimed: (time, own stream, host latency) in ms; on cpu the last two are 0."""
        if before_each is not None:
            before_each()
        if flush_buffer is not None:
            flush_buffer.fill_(0)  # evicts the inputs from L2
        if repetition is not None:
            torch.cuda.synchronize(device)
            return repetition(fn)
        t0 = time.thread_time_ns()  # run time, not wall time: see METHOD_REVISION 6 and cputime.py
        fn()
        return (time.thread_time_ns() - t0) / 1e6, 0.0, 0.0

    warm_up(lambda: measure()[0] / 1e3, config, until_settled=is_cuda)

    times: list[float] = []
    own: list[float] = []
    latency: list[float] = []
    start_all = time.perf_counter()
    while len(times) < config.max_reps:
        timed, own_ms, latency_ms = measure()
        times.append(timed)
        own.append(own_ms)
        latency.append(latency_ms)
        if enough(times, config, start_all):
            break
    if not is_cuda:
        return summarize(times, f"the calling thread's run time per call, median of {len(times)}")
    held = f"GPU held {config.hold_us:g} us before the start, " if repetition and repetition.hold else ""
    method = f"cuda events, {held}full device sync before the end less the host's return latency, L2 flushed"
    return summarize(times, f"{method}, median of {len(times)}", own, latency)
