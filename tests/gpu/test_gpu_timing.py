"""The CUDA timing method on a real GPU (cudagym/harness/timing.py, hold.py): the hold takes every SM, work
left on a side stream is timed in full, and the host's return latency is taken off.

Run on the device machine: ``python -m pytest -m gpu tests/gpu/test_gpu_timing.py``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cudagym.backends import query_gpu
from cudagym.harness import gpulib
from cudagym.harness.timing import TimingConfig, time_callable

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

QUICK = TimingConfig(warmup_max_seconds=0.3, min_reps=20, max_reps=100, budget_seconds=0.3)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    major, minor = torch.cuda.get_device_capability()
    return gpulib.build(tmp_path_factory.mktemp("hold"), f"sm_{major}{minor}")


def test_the_hold_keeps_a_side_stream_kernel_waiting_until_it_ends(library: Path) -> None:
    import torch

    gpu_hold = gpulib.GpuLib(library, 0)
    x = torch.zeros(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    start, done = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    gpu_hold.launch(500.0)
    with torch.cuda.stream(side):
        x.add_(1.0)  # a few microseconds of work, on a stream that does not wait for the hold
        done.record(side)
    torch.cuda.synchronize()
    assert start.elapsed_time(done) >= 0.45  # ms: it ran after the hold, not beside it
    assert torch.all(x == 1.0)


def test_work_left_on_a_side_stream_is_timed_in_full(library: Path) -> None:
    import torch

    side = torch.cuda.Stream()

    def leaves_work_behind() -> None:
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000)  # about 1 ms at the H200's clocks, never joined to the current stream

    stats = time_callable(leaves_work_behind, "cuda", dataclasses.replace(QUICK, gpu_library=str(library)))
    assert stats.stream_ms is not None and stats.stream_ms < 0.1  # the current stream saw nothing
    assert stats.median_ms >= 0.5, stats
    assert "GPU held 100 us" in stats.method


def test_the_host_return_latency_is_taken_off_a_short_kernel(library: Path) -> None:
    import torch

    x = torch.randn(1 << 22, device="cuda")
    y = torch.empty_like(x)
    config = dataclasses.replace(QUICK, gpu_library=str(library))
    stats = time_callable(lambda: torch.clamp_min(x, 0.0, out=y), "cuda", config)
    assert stats.latency_ms is not None and stats.latency_ms > 0
    assert stats.stream_ms is not None and stats.median_ms >= stats.stream_ms
    # what stays above the call's own stream is a fraction of the latency taken off, not all of it
    assert stats.median_ms - stats.stream_ms < 0.5 * stats.latency_ms, stats
