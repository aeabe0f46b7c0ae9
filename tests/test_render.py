"""What the agent is shown, one test per kind of observation: its first line says what happened, its second what to
do next, and it carries the evidence without the harness's noise (torch's C++ stacks, the profiler's warnings,
paths into the Python installation), within a bounded size. Results are built as the evaluator builds them, with
failure texts in the shapes torch and the compilers write them; ``tests/envs/test_faults.py`` checks the same on
real crashing candidates."""

from __future__ import annotations

import re
import string

from fault_texts import ILLEGAL_ACCESS, OWN_OUTPUT, PROFILER_WARNING, TERMINATE
from test_compiler_text import GCC

from cudagym.evaluator import describe_check
from cudagym.render import render
from cudagym.results import (
    CheckResult,
    CompileResult,
    CudaFault,
    FileResult,
    KernelResources,
    KernelTime,
    ProfileResult,
    Stage,
    StageResult,
    Status,
    SubmitResult,
    VerifyResult,
)
from cudagym.text import clean

MAX_OBSERVATION_CHARS = 6000
MAX_FRAME_LINES = 3


def shown(result: StageResult) -> str:
    """The observation as the environment makes it (rendered, then cleaned)."""
    return clean(render(result))


def assert_agent_facing(obs: str, first: str, next_words: str | None) -> None:
    """What every observation must hold (its opening) and must not (noise), and its bound."""
    lines = obs.splitlines()
    assert lines[0].startswith(first), obs
    if next_words is None:
        assert not lines[1:] or not lines[1].startswith("Next:"), obs
    else:
        assert lines[1].startswith("Next: ") and next_words in lines[1], obs
    assert set(obs) <= set(string.printable)
    assert len(obs) <= MAX_OBSERVATION_CHARS, len(obs)
    assert len([line for line in lines if re.match(r"\s*(frame )?#\d+", line)]) <= MAX_FRAME_LINES, obs
    for noise in (
        "Profiler clears events",
        "site-packages",
        "dist-packages",
        "<unknown function>",
        "CUDA_LAUNCH_BLOCKING",
    ):
        assert noise not in obs, (noise, obs)


def test_a_compile_error_shows_the_first_error_and_where_to_fix_it() -> None:
    result = CompileResult(Stage.COMPILE, Status.COMPILE_ERROR, "Compilation failed in relu.cpp.", 0.4, diagnostics=GCC)
    obs = shown(result)
    assert_agent_facing(obs, "[compile] COMPILE ERROR (0.4 s): Compilation failed in relu.cpp.", "kernels/helpers.h:3")
    assert (
        "'undefined_factor' was not declared in this scope" in obs and "In file included from kernels/relu.cpp:2" in obs
    )
    assert "4 more errors" in obs and "note:" not in obs and "missing_call" not in obs


def test_a_verify_that_stopped_at_the_build_shows_compiler_output_not_candidate_output() -> None:
    result = VerifyResult(
        Stage.VERIFY, Status.COMPILE_ERROR, "The build failed; call compile to see the diagnostics.", stderr=GCC
    )
    obs = shown(result)
    assert_agent_facing(obs, "[verify] COMPILE ERROR", "kernels/helpers.h:3")
    assert "compiler output:" in obs and "output of the candidate process" not in obs


def test_a_wrong_result_names_the_output_the_index_and_what_to_look_at() -> None:
    check = CheckResult(
        index=1,
        passed=False,
        max_abs_error=0.5,
        worst_index=(3, 4095),
        expected=1.0,
        actual=1.5,
        mismatched=64,
        total=1 << 20,
        output=1,
    )
    result = VerifyResult(
        Stage.VERIFY,
        Status.MISMATCH,
        "Output mismatch on check 2 of 5 (signed normal values): ...",
        2.0,
        checks=(CheckResult(index=0, passed=True, max_abs_error=0.0), check),
    )
    obs = shown(result)
    assert_agent_facing(obs, "[verify] MISMATCH", "only 64 of 1048576 elements of output 1 are wrong")
    assert "check 2: FAIL: output 1: 64 of 1048576 elements outside tolerance" in obs
    assert "at index [3, 4095] (expected 1, got 1.5)" in obs and "check 1: pass" in obs
    described = VerifyResult(
        Stage.VERIFY, Status.MISMATCH, f"Output mismatch on check 2: {describe_check(check)}", checks=(check,)
    )
    assert shown(described).count("64 of 1048576") == 2  # the message and the advice; the check line points up
    assert "  check 2: FAIL (above)" in shown(described)


def test_a_timeout_says_what_to_look_for() -> None:
    result = VerifyResult(
        Stage.VERIFY,
        Status.TIMEOUT,
        "The candidate did not finish within 120 s and was killed.",
        121.0,
        stderr=PROFILER_WARNING + "started the loop\n",
    )
    obs = shown(result)
    assert_agent_facing(obs, "[verify] TIMEOUT (121.0 s): The candidate did not finish within 120 s", "never ends")
    assert "started the loop" in obs  # its own print stays


def test_a_crash_names_the_signal_its_cause_and_the_python_line() -> None:
    output = (
        "Fatal Python error: Segmentation fault\n\nStack (most recent call first):\n"
        '  File "model_new.py", line 12 in forward\n'
        '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1789 in _call_impl\n'
        '  File "<harness>/candidate.py", line 431 in call\n\n'
        "Extension modules: numpy.core._multiarray_umath, torch._C (total: 20)\n"
    )
    result = VerifyResult(
        Stage.VERIFY,
        Status.CRASH,
        "The candidate process was killed by SIGSEGV while running ModelNew.",
        1.0,
        stderr=output,
        signal="SIGSEGV",
    )
    obs = shown(result)
    assert_agent_facing(
        obs, "[verify] CRASH (1.0 s): The candidate process was killed by SIGSEGV", "index past a buffer"
    )
    assert 'File "model_new.py", line 12 in forward' in obs
    assert "Extension modules" not in obs and "<harness>" not in obs


def test_a_cuda_fault_names_the_error_the_kernel_and_keeps_a_few_frames() -> None:
    fault = CudaFault(
        error="an illegal memory access was encountered",
        kind="illegal memory access",
        code="cudaErrorIllegalAddress",
        kernels=("relu_kernel(const float *, float *, long)",),
    )
    result = VerifyResult(
        Stage.VERIFY,
        Status.RUNTIME_ERROR,
        "CUDA fault while running ModelNew: CUDA error: an illegal memory access was encountered",
        2.5,
        stderr=PROFILER_WARNING + OWN_OUTPUT + ILLEGAL_ACCESS,
        fault=fault,
    )
    obs = shown(result)
    assert_agent_facing(obs, "[verify] RUNTIME ERROR (2.5 s): CUDA fault while running ModelNew", "outside its buffers")
    assert "CUDA fault: an illegal memory access was encountered (cudaErrorIllegalAddress)" in obs
    assert "kernel: relu_kernel(const float *, float *, long) (the build's only kernel)" in obs
    assert 'File "model_new.py", line 12, in forward' in obs and "relu_forward(at::Tensor) in cuda_extension.so" in obs
    assert "falling back to the slow path" in obs and "block size 256" in obs  # the candidate's own warning and print
    assert len(obs) < 1500, obs


def test_a_fault_among_several_kernels_lists_them_and_the_sanitizer_finding() -> None:
    fault = CudaFault(
        error="misaligned address",
        kind="misaligned address",
        code="cudaErrorMisalignedAddress",
        kernels=("a_kernel", "b_kernel"),
        sanitizer=(
            "Invalid __global__ read of size 16 bytes\nat b_kernel+0x40 in kernels/b.cu:9\n"
            "by thread (3,0,0) in block (0,0,0)"
        ),
    )
    result = ProfileResult(
        Stage.PROFILE,
        Status.CRASH,
        "The candidate process was killed by SIGABRT while running ModelNew.",
        3.0,
        stderr=TERMINATE,
        signal="SIGABRT",
        fault=fault,
    )
    obs = shown(result)
    assert_agent_facing(obs, "[profile] CRASH", "16 bytes")  # the fault's advice wins over the signal's
    assert "one of the build's 2 kernels (a_kernel, b_kernel)" in obs
    assert "at b_kernel+0x40 in kernels/b.cu:9" in obs and "25 C++ frames; none in your code" in obs


def test_success_says_what_comes_next() -> None:
    compiled = CompileResult(
        Stage.COMPILE,
        Status.OK,
        "Built cuda_extension (2 compiled, 0 reused).",
        3.1,
        kernels=(KernelResources("relu_kernel", registers=16),),
    )
    assert_agent_facing(shown(compiled), "[compile] OK (3.1 s): Built cuda_extension", "verify")
    verified = VerifyResult(
        Stage.VERIFY,
        Status.OK,
        "All 5 checks passed.",
        1.2,
        checks=(CheckResult(0, True, 0.0),),
        stderr=PROFILER_WARNING,
    )
    obs = shown(verified)
    assert_agent_facing(obs, "[verify] OK (1.2 s): All 5 checks passed.", "profile")
    assert "output of the candidate" not in obs
    for candidate, eager, compiled_ms, words in [
        (1.0, 2.0, 1.5, "faster than eager and torch.compile: submit"),
        (1.0, 2.0, 0.5, "faster than eager, not than torch.compile"),
        (2.0, 1.0, 0.5, "not faster than eager yet"),
    ]:
        profiled = ProfileResult(
            Stage.PROFILE,
            Status.OK,
            "ModelNew ...",
            9.0,
            candidate_ms=candidate,
            eager_ms=eager,
            compile_ms=compiled_ms,
            speedup_eager=eager / candidate,
            speedup_compile=compiled_ms / candidate,
            kernels=(KernelTime("relu_kernel", 10, 1.0, 1.0),),
        )
        assert_agent_facing(shown(profiled), "[profile] OK (9.0 s)", words)
    busy = ProfileResult(Stage.PROFILE, Status.OK, "ModelNew ...", candidate_ms=1.0, eager_ms=2.0, timing_fair=False)
    assert_agent_facing(shown(busy), "[profile] OK", "not fair: profile again")


def test_a_submit_says_the_episode_is_over_and_gives_no_advice() -> None:
    verify = VerifyResult(Stage.VERIFY, Status.CRASH, "killed by SIGSEGV", stderr="oops\n", signal="SIGSEGV")
    result = SubmitResult(Stage.SUBMIT, Status.CRASH, "Tier -1. killed by SIGSEGV", tier=-1, verify=verify)
    obs = shown(result)
    assert obs.splitlines()[:2] == ["[submit] tier -1: Tier -1. killed by SIGSEGV", "The episode is over."]
    assert "Next:" not in obs and "oops" in obs


def test_file_tools_and_refusals_say_it_in_their_first_line() -> None:
    wrote = FileResult(Stage.WRITE_FILE, Status.OK, "Wrote kernels/relu.cpp (120 bytes).", path="kernels/relu.cpp")
    assert shown(wrote) == "[write_file] OK: Wrote kernels/relu.cpp (120 bytes)."
    refused = FileResult(Stage.WRITE_FILE, Status.FILE_ERROR, "model.py is fixed: write kernels/*.cu or model_new.py.")
    assert_agent_facing(shown(refused), "[write_file] FILE ERROR: model.py is fixed", None)


def test_a_harness_failure_says_it_is_not_the_agents_doing() -> None:
    result = VerifyResult(Stage.VERIFY, Status.HARNESS_ERROR, "The evaluation harness failed: reference died")
    assert_agent_facing(shown(result), "[verify] HARNESS ERROR", "not your code")
