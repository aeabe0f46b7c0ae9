"""The candidate's failure text made short for the agent: torch's C++ errors and CUDA faults, tracebacks, the harness's
own warnings, repeats. The texts are in the shapes torch, CPython and the CUDA runtime write them."""

from __future__ import annotations

import re

import pytest
from fault_texts import CAPTURED, ILLEGAL_ACCESS, KINETO_LOGS, OWN_OUTPUT, PROFILER_WARNING, SITE, TERMINATE

from cudagym.fault_text import (
    collapse_repeats,
    condense,
    find_cuda_fault,
    headline,
    hide_install_paths,
    says_out_of_memory,
)
from cudagym.harness.common import CUDA_ERROR_NAMES


def frame_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"\s*(frame )?#\d+", line.strip())]


def test_an_illegal_memory_access_keeps_the_error_the_agents_frames_and_no_stack() -> None:
    out = condense(ILLEGAL_ACCESS)
    assert "CUDA error: an illegal memory access was encountered" in out
    assert 'File "model_new.py", line 12, in forward' in out and "cuda_extension.relu_forward(x)" in out
    assert "relu_forward(at::Tensor) in cuda_extension.so" in out  # the agent's own C++ frame, named short
    assert "27 C++ frames" in out and "4 frames of the harness and libraries" in out
    assert "frame #" not in out and "<unknown function>" not in out and "0x2a1ca" not in out
    for absent in ("site-packages", "<harness>", "CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA", "^^^^", "libc10"):
        assert absent not in out, (absent, out)
    assert len(out.splitlines()) <= 12 and len(out) < len(ILLEGAL_ACCESS) / 4, out


def test_a_fault_in_a_destructor_keeps_what_and_the_python_line_and_drops_the_frames() -> None:
    out = condense(TERMINATE)
    assert "terminate called after throwing an instance of 'c10::Error'" in out
    assert "what():  CUDA error: misaligned address" in out and "cudaErrorMisalignedAddress" in out
    assert 'File "model_new.py", line 9 in forward' in out  # faulthandler's form of a frame
    assert "25 C++ frames; none in your code" in out
    assert not frame_lines(out) and "Extension modules" not in out and "https://" not in out
    assert "site-packages" not in out and "<harness>" not in out


def test_the_captured_cpp_traceback_keeps_the_agents_frame_and_where_it_raised() -> None:
    out = condense(CAPTURED.replace("/tmp/ws/", ""))  # the workspace's path, as the evaluator's cleaning leaves it
    assert "RuntimeError: x must have 7 dims, got 1" in out
    assert "raised from relu_forward at kernels/relu_binding.cpp:7" in out
    assert "relu_forward(at::Tensor) in relu_binding.cpp:7" in out
    assert "5 C++ frames; those in your code: 1" in out
    assert "torchCheckFail" not in out and "symbolizing" not in out and "CapturedTraceback" not in out


def test_the_harness_warnings_go_and_the_candidates_own_output_stays() -> None:
    out = condense(PROFILER_WARNING + KINETO_LOGS + OWN_OUTPUT + PROFILER_WARNING)
    assert "Profiler clears events" not in out and "_warn_once" not in out
    assert "profiler_start" not in out and "Completed Stage" not in out
    assert out == OWN_OUTPUT.strip()  # its warning (with its source line) and its print, unchanged


def test_a_harness_frame_warning_goes_whatever_its_message() -> None:
    text = "<harness>/candidate.py:360: UserWarning: something the harness's call raised\n  self.session.__enter__()\n"
    assert condense(text + "kept\n") == "kept"


def test_a_device_side_assert_printed_by_every_thread_is_kept_twice_and_counted() -> None:
    lines = [
        f"kernels/relu.cu:12: void relu_kernel(const float *, float *, long): block: [{b},0,0], thread: [{t},0,0] "
        "Assertion `i < n` failed."
        for b in range(4)
        for t in range(32)
    ]
    out = condense("\n".join(lines))
    assert out.count("Assertion `i < n` failed.") == 2
    assert "the line above 126 more times" in out


def test_repeats_of_the_same_line_are_counted_and_different_lines_kept() -> None:
    assert collapse_repeats(["a", "a", "a", "a", "b", "a"]) == [
        "a",
        "a",
        "[... the line above 2 more times, for other threads or calls]",
        "b",
        "a",
    ]


def test_condensed_output_is_bounded() -> None:
    text = "\n".join(f"step {i}: value {i * 7}" for i in range(20_000))
    out = condense(text, limit=2000)
    assert len(out) <= 2000 and out.startswith("step 0") and out.endswith("value 139993")


def test_paths_into_the_installation_are_shortened() -> None:
    line = f"In file included from {SITE}/torch/include/ATen/ATen.h:7, from /opt/py/dist-packages/x/y.h:2"
    assert hide_install_paths(line) == "In file included from torch/include/ATen/ATen.h:7, from x/y.h:2"


@pytest.mark.parametrize(
    ("text", "kind", "code"),
    [
        (ILLEGAL_ACCESS, "illegal memory access", ""),
        (TERMINATE, "misaligned address", "cudaErrorMisalignedAddress"),
        (
            "RuntimeError: CUDA error: too many resources requested for launch",
            "too many resources requested for launch",
            "",
        ),
        ("RuntimeError: CUDA error: device-side assert triggered", "device-side assert", ""),
        ("k.cu:3: void k(): block: [0,0,0], thread: [1,0,0] Assertion `x` failed.", "device-side assert", ""),
        (
            "RuntimeError: CUDA driver error: invalid argument (CUDA_ERROR_INVALID_VALUE)",
            "invalid argument",
            "CUDA_ERROR_INVALID_VALUE",
        ),
    ],
)
def test_cuda_faults_are_named(text: str, kind: str, code: str) -> None:
    fault = find_cuda_fault(text)
    assert fault is not None and fault.kind == kind and fault.kind in CUDA_ERROR_NAMES
    assert fault.code == code


@pytest.mark.parametrize(
    "text",
    [
        "ValueError: invalid argument for reshape",  # the words of a CUDA error outside a CUDA error line
        "RuntimeError: x must be a CUDA tensor",
        OWN_OUTPUT,
    ],
)
def test_other_errors_are_no_cuda_fault(text: str) -> None:
    assert find_cuda_fault(text) is None


def test_the_headline_is_the_first_line_that_says_something() -> None:
    message = ILLEGAL_ACCESS[ILLEGAL_ACCESS.index("CUDA error") :]
    assert headline(message) == "CUDA error: an illegal memory access was encountered"
    assert headline("\n\nboom\nmore") == "boom"
    assert len(headline("x" * 1000, limit=50)) == 50


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", True),
        ("RuntimeError: CUDA error: out of memory", True),
        ("reference load failed: CUDA_ERROR_OUT_OF_MEMORY", True),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", False),
        ("ValueError: shapes do not match", False),
    ],
)
def test_an_error_that_says_the_device_ran_out_of_memory_is_told_from_other_faults(text: str, says: bool) -> None:
    assert says_out_of_memory(text) is says
