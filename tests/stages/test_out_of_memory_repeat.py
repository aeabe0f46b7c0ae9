"""A candidate's own out-of-memory failure is run once more before it counts (``stages.faults.judged_twice``): the
device's reading comes after the candidate has gone, so a process that filled the device during the run and freed it
before the reading made an honest candidate's shortage look like its own. The second run's verdict stands, whatever
it is; nothing else is run twice. The GPU side (a co-tenant that frees the device between the failure and the
reading) is ``tests/gpu/test_device_shortage.py``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from cudagym.results import ProfileResult, Stage, Status, VerifyResult
from cudagym.stages import faults
from cudagym.stages.faults import judged_twice, ran_out_on_its_own

OOM = "CUDA fault while running ModelNew: CUDA out of memory. Tried to allocate 4.00 GiB"


def evaluator(cuda: bool = True) -> Any:
    return SimpleNamespace(backend=SimpleNamespace(is_cuda=cuda), task=SimpleNamespace(id="builtin/relu"))


def runs(*results: VerifyResult | ProfileResult) -> tuple[list[int], Any]:
    """A stage that answers ``results`` in turn, and the list that counts its runs."""
    count: list[int] = []

    def run() -> VerifyResult | ProfileResult:
        count.append(1)
        return results[len(count) - 1]

    return count, run


def verified(status: Status, message: str = "") -> VerifyResult:
    return VerifyResult(stage=Stage.VERIFY, status=status, message=message, seconds=1.0)


def test_an_own_shortage_is_run_again_and_the_second_verdict_stands() -> None:
    count, run = runs(verified(Status.RUNTIME_ERROR, OOM), verified(Status.OK, "All 2 checks passed."))
    result = judged_twice(evaluator(), run)
    assert len(count) == 2
    assert result.status is Status.OK and result.message == "All 2 checks passed."


def test_a_candidate_that_runs_out_again_keeps_its_error_and_is_not_run_a_third_time() -> None:
    count, run = runs(verified(Status.RUNTIME_ERROR, OOM), verified(Status.RUNTIME_ERROR, OOM), verified(Status.OK))
    result = judged_twice(evaluator(), run)
    assert len(count) == 2
    assert result.status is Status.RUNTIME_ERROR and "out of memory" in result.message


def test_a_second_run_that_finds_the_machine_short_says_so() -> None:
    # the first run's shortage looked like the candidate's; the second ran into the co-tenant still holding the device
    second = verified(Status.HARNESS_ERROR, "The device ran out of memory for a reason outside the candidate")
    count, run = runs(verified(Status.LOAD_ERROR, OOM), second)
    result = judged_twice(evaluator(), run)
    assert len(count) == 2
    assert (result.status, result.message) == (second.status, second.message)


def test_the_result_takes_the_time_of_both_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    _, run = runs(verified(Status.RUNTIME_ERROR, OOM), verified(Status.OK))
    clock = iter([10.0, 25.0])
    monkeypatch.setattr(faults.time, "monotonic", lambda: next(clock))
    assert judged_twice(evaluator(), run).seconds == 15.0


def test_a_profile_is_run_again_too() -> None:
    first = ProfileResult(stage=Stage.PROFILE, status=Status.RUNTIME_ERROR, message=OOM, seconds=2.0)
    second = ProfileResult(stage=Stage.PROFILE, status=Status.OK, message="timed", seconds=3.0)
    count, run = runs(first, second)
    result = judged_twice(evaluator(), run)
    assert len(count) == 2 and result.status is Status.OK and result.message == "timed"


@pytest.mark.parametrize(
    ("status", "message", "cuda"),
    [
        (Status.OK, "All 2 checks passed.", True),
        (Status.MISMATCH, "Output mismatch on check 1: out of memory", True),  # a wrong output is no failure to run
        (Status.RUNTIME_ERROR, "CUDA error: an illegal memory access was encountered", True),
        (Status.TIMEOUT, OOM, True),
        (Status.HARNESS_ERROR, "The device ran out of memory for a reason outside the candidate", True),
        (Status.RUNTIME_ERROR, OOM, False),  # no device to share on cpu
    ],
)
def test_nothing_but_an_own_shortage_on_the_gpu_is_run_twice(status: Status, message: str, cuda: bool) -> None:
    result = verified(status, message)
    count, run = runs(result, verified(Status.OK))
    assert not ran_out_on_its_own(evaluator(cuda), result)
    assert judged_twice(evaluator(cuda), run) is result
    assert len(count) == 1
