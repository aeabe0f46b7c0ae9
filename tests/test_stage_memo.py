"""The failure memo: only failures of the candidate's own are kept, by content, and a recall is always that failure
(never a pass), told as the asking stage's result."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cudagym.results import ProfileResult, Stage, Status, VerifyResult
from cudagym.stage_memo import CANDIDATE_SHARE, CAPACITY, FailureMemo, memo_key

TIMEOUT_S = 10.0
LOOP = VerifyResult(Stage.VERIFY, Status.TIMEOUT, "The candidate did not finish within 10 s and was killed.")
SEGFAULT = VerifyResult(Stage.VERIFY, Status.CRASH, "killed by SIGSEGV", stderr="trace", signal="SIGSEGV")
SLOW_PROFILE = ProfileResult(Stage.PROFILE, Status.TIMEOUT, "The candidate did not finish within 10 s and was killed.")


def test_a_timeout_is_kept_only_when_the_candidate_had_the_time_itself() -> None:
    memo = FailureMemo()
    assert not memo.remember("k", LOOP, candidate_seconds=None, timeout=TIMEOUT_S)  # never ran its code
    assert not memo.remember("k", LOOP, candidate_seconds=CANDIDATE_SHARE * TIMEOUT_S - 0.1, timeout=TIMEOUT_S)
    assert memo.recall("k", Stage.VERIFY) is None
    assert memo.remember("k", LOOP, candidate_seconds=TIMEOUT_S, timeout=TIMEOUT_S)
    recalled = memo.recall("k", Stage.VERIFY, seconds=0.01)
    assert isinstance(recalled, VerifyResult) and recalled.status is Status.TIMEOUT and recalled.seconds == 0.01
    assert recalled.message == (
        "Not run again: the same files timed out in verify under a second ago "
        "(the candidate did not finish within 10 s and was killed); change them first."
    )


@pytest.mark.parametrize(
    ("result", "kept"),
    [
        (SEGFAULT, True),
        (VerifyResult(Stage.VERIFY, Status.CRASH, "killed by SIGABRT", signal="SIGABRT"), True),
        (VerifyResult(Stage.VERIFY, Status.CRASH, "killed by SIGKILL", signal="SIGKILL"), False),  # maybe not its own
        (VerifyResult(Stage.VERIFY, Status.CRASH, "could not be started"), False),
        (VerifyResult(Stage.VERIFY, Status.OK, "All checks passed"), False),
        (VerifyResult(Stage.VERIFY, Status.MISMATCH, "Output mismatch"), False),
        (VerifyResult(Stage.VERIFY, Status.HARNESS_ERROR, "The evaluation harness failed"), False),
        (VerifyResult(Stage.VERIFY, Status.RUNTIME_ERROR, "ValueError"), False),
    ],
    ids=["segv", "abort", "kill", "no-start", "ok", "mismatch", "harness", "runtime"],
)
def test_only_crashes_by_the_candidates_own_fault_signals_are_kept(result: VerifyResult, kept: bool) -> None:
    memo = FailureMemo()
    assert memo.remember("k", result, candidate_seconds=TIMEOUT_S, timeout=TIMEOUT_S) is kept
    assert (memo.recall("k", Stage.VERIFY) is not None) is kept


def test_a_verify_failure_answers_profile_but_a_profile_failure_does_not_answer_verify() -> None:
    memo = FailureMemo()
    memo.remember("verify-loop", SEGFAULT, candidate_seconds=TIMEOUT_S, timeout=TIMEOUT_S)
    profiled = memo.recall("verify-loop", Stage.PROFILE)
    assert isinstance(profiled, ProfileResult) and profiled.stage is Stage.PROFILE
    assert profiled.status is Status.CRASH and profiled.signal == "SIGSEGV" and profiled.stderr == "trace"
    assert profiled.candidate_ms is None and profiled.speedup_eager is None
    assert "crashed in verify" in profiled.message
    memo.remember("slow", SLOW_PROFILE, candidate_seconds=TIMEOUT_S, timeout=TIMEOUT_S)
    assert memo.recall("slow", Stage.VERIFY) is None  # verify runs fewer calls: it may finish
    assert memo.recall("slow", Stage.PROFILE) is not None
    assert memo.recall("other", Stage.PROFILE) is None


@given(
    st.lists(st.sampled_from(list(Status)), max_size=6),
    st.lists(st.sampled_from(["", "SIGSEGV", "SIGKILL"]), min_size=6, max_size=6),
    st.sampled_from([Stage.VERIFY, Stage.PROFILE]),
)
def test_a_recall_is_never_a_pass(statuses: list[Status], signals: list[str], stage: Stage) -> None:
    memo = FailureMemo()
    for status, signal in zip(statuses, signals, strict=False):
        memo.remember("k", VerifyResult(Stage.VERIFY, status, signal=signal), candidate_seconds=9.0, timeout=10.0)
        memo.remember("k", ProfileResult(Stage.PROFILE, status, signal=signal), candidate_seconds=9.0, timeout=10.0)
        recalled = memo.recall("k", stage)
        assert recalled is None or recalled.status in (Status.TIMEOUT, Status.CRASH)


def test_the_key_is_the_content() -> None:
    files = {"kernels/a.cpp": b"int a;", "model_new.py": b"class ModelNew: ..."}
    key = memo_key(files, "build", "task")
    assert key == memo_key(dict(reversed(list(files.items()))), "build", "task")  # not the order of the files
    assert key != memo_key({**files, "kernels/a.cpp": b"int a; "}, "build", "task")  # a byte of a file
    assert key != memo_key({"kernels/b.cpp": b"int a;", "model_new.py": files["model_new.py"]}, "build", "task")
    assert key != memo_key({**files, "kernels/b.h": b""}, "build", "task")  # an empty file more
    assert key != memo_key(files, "build2", "task") and key != memo_key(files, "build", "task2")
    assert memo_key({"a": b"bc"}, "x") != memo_key({"ab": b"c"}, "x")  # where a path ends and its bytes begin


def test_the_oldest_failure_is_forgotten_first() -> None:
    memo = FailureMemo(capacity=CAPACITY)
    for i in range(CAPACITY + 1):
        memo.remember(f"k{i}", LOOP, candidate_seconds=TIMEOUT_S, timeout=TIMEOUT_S)
    assert len(memo) == CAPACITY
    assert memo.recall("k0", Stage.VERIFY) is None and memo.recall(f"k{CAPACITY}", Stage.VERIFY) is not None
