"""compute-sanitizer after a CUDA fault: its report made short, the tool found where it is installed and nowhere else,
run only when asked for, on the cuda backend, where it is installed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cudagym import sanitizer
from cudagym.backends import resolve_backend
from cudagym.eval_config import EvalConfig, sanitizes_faults

# memcheck's report in the shape compute-sanitizer 2025 writes it (host frames on two lines each)
REPORT = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at scale_kernel(float *, int)+0x70 in kernels/scale.cu:3
=========     by thread (0,0,0) in block (4,0,0)
=========     Address 0x7f4a3e001000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f4a3e000000 of size 4096 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f2a3]
=========                    in /lib/x86_64-linux-gnu/libcuda.so.1
=========         Host Frame: [0x1c3d1]
=========                    in /opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so
=========
========= Invalid __global__ write of size 4 bytes
=========     at scale_kernel(float *, int)+0x70 in kernels/scale.cu:3
=========     by thread (1,0,0) in block (4,0,0)
=========     Address 0x7f4a3e001004 is out of bounds
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2f2a3]
=========                    in /lib/x86_64-linux-gnu/libcuda.so.1
=========
========= ERROR SUMMARY: 1025 errors
"""  # noqa: E501 (what the tool writes)


def test_the_first_error_is_kept_without_its_host_backtrace() -> None:
    summary = sanitizer.summarize(REPORT)
    assert summary.splitlines() == [
        "Invalid __global__ write of size 4 bytes",
        "at scale_kernel(float *, int)+0x70 in kernels/scale.cu:3",
        "by thread (0,0,0) in block (4,0,0)",
        "Address 0x7f4a3e001000 is out of bounds",
        "and is 1 bytes after the nearest allocation at 0x7f4a3e000000 of size 4096 bytes",
        "(1025 errors in all; the first is shown)",
    ]
    assert "Host Frame" not in summary and "libcuda" not in summary and "site-packages" not in summary


def test_a_report_without_errors_summarises_to_nothing() -> None:
    assert sanitizer.summarize("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == ""
    assert sanitizer.summarize("") == ""


def test_the_prefix_runs_memcheck_into_its_own_log(tmp_path: Path) -> None:
    prefix = sanitizer.command_prefix("/opt/cuda/bin/compute-sanitizer", tmp_path / "log")
    assert prefix[0] == "/opt/cuda/bin/compute-sanitizer"
    assert prefix[prefix.index("--tool") + 1] == "memcheck"
    assert prefix[prefix.index("--log-file") + 1] == str(tmp_path / "log")


def test_the_tool_is_found_in_the_cuda_installation_and_not_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/bin/compute-sanitizer").exists():
        pytest.skip("this machine has compute-sanitizer in /usr/local/cuda")
    assert sanitizer.find_tool() is None
    tool = tmp_path / "cuda" / "bin" / "compute-sanitizer"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert sanitizer.find_tool() == str(tool)
    assert os.access(tool, os.X_OK)


def test_the_sanitizer_runs_only_on_cuda_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = resolve_backend("cpu")
    assert not sanitizes_faults(EvalConfig(), cpu) and not sanitizes_faults(EvalConfig(fault_sanitizer=True), cpu)
    cuda = type("FakeCuda", (), {"is_cuda": True})()
    monkeypatch.setattr(sanitizer, "find_tool", lambda: None)
    assert not sanitizes_faults(EvalConfig(fault_sanitizer=True), cuda)  # type: ignore[arg-type]
    monkeypatch.setattr(sanitizer, "find_tool", lambda: "/usr/local/cuda/bin/compute-sanitizer")
    assert sanitizes_faults(EvalConfig(fault_sanitizer=True), cuda)  # type: ignore[arg-type]
    assert not sanitizes_faults(EvalConfig(), cuda)  # type: ignore[arg-type]  (off unless asked for)
