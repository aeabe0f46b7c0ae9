"""The "Next:" line: chosen from the result alone, it names the likely cause of each kind of failure."""

from __future__ import annotations

import pytest

from cudagym.advice import CUDA_FAULT_ADVICE, SIGNAL_ADVICE, next_step
from cudagym.harness.common import CUDA_ERROR_NAMES
from cudagym.results import CheckResult, CudaFault, FileResult, Stage, StageResult, Status, VerifyResult


def test_every_known_cuda_fault_and_fault_signal_has_its_advice() -> None:
    assert set(CUDA_FAULT_ADVICE) == set(CUDA_ERROR_NAMES)
    assert {"SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT"} <= set(SIGNAL_ADVICE)


@pytest.mark.parametrize(
    ("check", "words"),
    [
        (CheckResult(0, False, 1.0, mismatched=3, total=10_000), "only 3 of 10000 elements of the output are wrong"),
        (CheckResult(0, False, 1.0, mismatched=9_999, total=10_000), "nearly every element"),
        (CheckResult(0, False, 1.0, mismatched=500, total=10_000), "at the index given"),
        (CheckResult(0, False, 1.0, mismatched=5, total=10, problem="2 NaN/Inf value(s) where"), "holds NaN/Inf"),
        (CheckResult(0, False, 1e-3, problem="the output is less precise than fp32 arithmetic allows"), "fp32"),
        (CheckResult(0, False, problem="output 1: shape (3,), expected (4,)", output=1), "output 1 has the wrong"),
    ],
)
def test_a_wrong_result_points_at_what_the_failed_check_shows(check: CheckResult, words: str) -> None:
    result = VerifyResult(Stage.VERIFY, Status.MISMATCH, "mismatch", checks=(CheckResult(1, True), check))
    assert words in next_step(result) and next_step(result).endswith("then verify again.")


def test_a_cuda_fault_is_advised_by_its_kind_whatever_the_status() -> None:
    fault = CudaFault("too many resources requested for launch", "too many resources requested for launch")
    for status in (Status.RUNTIME_ERROR, Status.CRASH):
        result = VerifyResult(Stage.VERIFY, status, "x", signal="SIGABRT", fault=fault)
        assert "__launch_bounds__" in next_step(result)


def test_output_is_pointed_at_only_when_there_is_some() -> None:
    missing = VerifyResult(Stage.VERIFY, Status.LOAD_ERROR, "model_new.py does not exist; write it.")
    assert "below" not in next_step(missing)
    failed = VerifyResult(Stage.VERIFY, Status.LOAD_ERROR, "ImportError ...", stderr="Traceback ...")
    assert "(output below)" in next_step(failed)


def test_refusals_and_file_tools_get_no_line_their_message_says_it() -> None:
    assert next_step(StageResult(Stage.PARSE, Status.INVALID_CALL, "Could not parse ...")) == ""
    assert next_step(FileResult(Stage.READ_FILE, Status.FILE_ERROR, "no such file")) == ""
    assert next_step(FileResult(Stage.WRITE_FILE, Status.OK, "Wrote a.cpp")) == ""
