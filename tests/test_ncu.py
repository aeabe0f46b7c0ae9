"""Nsight Compute summaries: the candidate's kernels only, and a reason when there are none."""

from __future__ import annotations

from cudagym.ncu import summarize_ncu

HEADER = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n'


def row(ident: int, kernel: str, metric: str, unit: str, value: str) -> str:
    return f'"{ident}","{kernel}","GPU Speed Of Light Throughput","{metric}","{unit}","{value}"\n'


def test_only_the_candidates_kernels_are_summarised() -> None:
    text = (
        "==PROF== Connected to process 1\n"
        + HEADER
        + row(0, "void at::native::vectorized_elementwise_kernel<4>(int)", "Duration", "us", "3.1")
        + row(1, "relu_vec4_kernel(const float4 *, float4 *, long)", "Duration", "us", "410.2")
        + row(1, "relu_vec4_kernel(const float4 *, float4 *, long)", "Memory Throughput", "%", "91.5")
    )
    summary = summarize_ncu(text)
    assert summary.startswith("- relu_vec4_kernel") and "Duration: 410.2 us" in summary and "91.5 %" in summary
    assert "at::native" not in summary


def test_no_kernel_of_the_candidate_says_what_was_profiled_and_what_ncu_reported() -> None:
    text = (
        "==WARNING== Could not profile kernel 3: the profiling session was interrupted\n"
        + HEADER
        + row(0, "void at::native::vectorized_elementwise_kernel<4>(int)", "Duration", "us", "3.1")
    )
    summary = summarize_ncu(text)
    assert "profiled no kernels of yours" in summary
    assert "vectorized_elementwise_kernel" in summary and "session was interrupted" in summary
    assert "It profiled no kernel at all." in summarize_ncu("==ERROR== ERR_NVGPUCTRPERM\n")
    assert "ERR_NVGPUCTRPERM" in summarize_ncu("==ERROR== ERR_NVGPUCTRPERM\n")
