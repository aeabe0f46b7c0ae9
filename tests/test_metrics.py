"""The benchmark metrics against values computed by hand on a fixed results file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cudagym.metrics import EpisodeResult, compute_metrics, fast_p, geometric_mean, read_results
from cudagym.results import ProfileResult, Stage, Status, milestone_tier

# Seven problems t1..t7; t7 has no result (missing = incorrect), t1 has an early error line that the
# later line supersedes. Times in ms, speedup = baseline / candidate.
#   task  tier correct cand  eager compile  s_eager s_compile  note
#   t1    3    yes     1.0   2.0   1.5      2.0     1.5        faster than both
#   t2    2    yes     1.0   1.2   0.8      1.2     0.8        faster than eager only
#   t3    1    yes     1.0   1.052 1.052    1.052   1.052      (1.052-1)/1.052 = 0.0494 < 0.05: not faster
#   t4    1    yes     2.0   1.0   0.5      0.5     0.25       slower
#   t5    -1   no      compiled, wrong
#   t6    -1   no      the episode ended in an error
#   t7    missing
RESULT_LINES = [
    {"task_id": "t1", "stop_reason": "error", "error": "RuntimeError: flaky"},
    {"task_id": "t1", "tier": 3, "submitted": True, "compiled": True, "correct": True, "candidate_ms": 1.0,
     "eager_ms": 2.0, "compile_ms": 1.5, "speedup_eager": 2.0, "speedup_compile": 1.5, "turns": 10, "seconds": 4.0,
     "tokens": 1000},
    {"task_id": "t2", "tier": 2, "submitted": True, "compiled": True, "correct": True, "candidate_ms": 1.0,
     "eager_ms": 1.2, "compile_ms": 0.8, "speedup_eager": 1.2, "speedup_compile": 0.8, "turns": 8, "seconds": 3.0},
    {"task_id": "t3", "tier": 1, "submitted": True, "compiled": True, "correct": True, "candidate_ms": 1.0,
     "eager_ms": 1.052, "compile_ms": 1.052, "speedup_eager": 1.052, "speedup_compile": 1.052, "turns": 6,
     "seconds": 2.0},
    {"task_id": "t4", "tier": 1, "submitted": True, "compiled": True, "correct": True, "candidate_ms": 2.0,
     "eager_ms": 1.0, "compile_ms": 0.5, "speedup_eager": 0.5, "speedup_compile": 0.25, "turns": 4, "seconds": 1.0},
    {"task_id": "t5", "tier": -1, "submitted": True, "compiled": True, "correct": False, "turns": 2, "seconds": 0.5},
    {"task_id": "t6", "tier": -1, "stop_reason": "error", "error": "RuntimeError: boom", "seconds": 0.5},
    {"task_id": "other", "tier": 3, "submitted": True, "compiled": True, "correct": True, "speedup_eager": 9.0},
]  # fmt: skip
TASK_IDS = ["t1", "t2", "t3", "t4", "t5", "t6", "t7"]


@pytest.fixture
def results_file(tmp_path: Path) -> Path:
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in RESULT_LINES) + "\n\n")
    return path


def test_metrics_match_hand_computed_values(results_file: Path) -> None:
    m = compute_metrics(read_results(results_file), task_ids=TASK_IDS)
    assert (m.n, m.evaluated, m.missing) == (7, 6, 1)  # "other" is not a problem of this run
    assert (m.submitted, m.compiled, m.correct, m.errors) == (5, 5, 4, 1)  # t1's error line is superseded
    assert m.pass_rate == pytest.approx(4 / 7)  # t1..t4
    assert m.compile_rate == pytest.approx(5 / 7)  # t1..t5
    assert m.faster_than_eager == 2 and m.faster_than_eager_rate == pytest.approx(2 / 7)  # t1, t2 (t3: 4.9%)
    assert m.faster_than_compile == 1 and m.faster_than_compile_rate == pytest.approx(1 / 7)  # t1
    assert dict(m.tier_counts) == {-1: 2, 1: 2, 2: 1, 3: 1}
    # geometric means over the four correct results:
    # eager (2.0 * 1.2 * 1.052 * 0.5) ** (1/4) = 1.2624 ** 0.25 = 1.05999...
    # compile (1.5 * 0.8 * 1.052 * 0.25) ** (1/4) = 0.3156 ** 0.25 = 0.74952...
    assert m.geomean_speedup_eager == pytest.approx(1.2624**0.25) and m.geomean_speedup_eager == pytest.approx(
        1.06, 1e-3
    )
    assert m.geomean_speedup_compile == pytest.approx(0.3156**0.25) and m.geomean_speedup_compile == pytest.approx(
        0.7495, 1e-3
    )
    assert m.timed_correct == 4
    # fast_p = count(correct and speedup > p) / 7, strict:
    # eager speedups 2.0, 1.2, 1.052, 0.5: p=0 -> 4; 0.5 -> 3 (0.5 is not > 0.5); 0.8 -> 3; 1 -> 3; 1.5 -> 1; 2 -> 0
    assert dict(m.fast_p_eager) == pytest.approx({0.0: 4 / 7, 0.5: 3 / 7, 0.8: 3 / 7, 1.0: 3 / 7, 1.5: 1 / 7, 2.0: 0.0})
    # compile speedups 1.5, 0.8, 1.052, 0.25: p=0 -> 4; 0.5 -> 3; 0.8 -> 2 (0.8 is not > 0.8); 1 -> 2; 1.5 -> 0; 2 -> 0
    assert dict(m.fast_p_compile) == pytest.approx({0.0: 4 / 7, 0.5: 3 / 7, 0.8: 2 / 7, 1.0: 2 / 7, 1.5: 0.0, 2.0: 0.0})
    # mean tier with the missing t7 as -1: (3 + 2 + 1 + 1 - 1 - 1 - 1) / 7 = 4 / 7
    assert m.mean_tier == pytest.approx(4 / 7)
    assert m.mean_turns == pytest.approx((10 + 8 + 6 + 4 + 2 + 0) / 6)
    assert m.total_seconds == pytest.approx(4 + 3 + 2 + 1 + 0.5 + 0.5) and m.total_tokens == 1000
    assert json.loads(json.dumps(m.to_json()))["fast_p_eager"]["1.5"] == pytest.approx(1 / 7)


def test_without_task_ids_the_problems_are_the_results_tasks(results_file: Path) -> None:
    m = compute_metrics(read_results(results_file))
    assert (m.n, m.missing, m.correct) == (7, 0, 5)  # t1..t6 and "other"


def test_faster_is_the_tiers_test_not_speedup_over_1_05() -> None:
    # (t0 - t) / t0 > 0.05  <=>  speedup > 1 / 0.95 = 1.05263...; 1.052 is not faster, 1.053 is.
    for speedup, faster in ((1.052, False), (1.053, True)):
        timed = EpisodeResult("t", tier=1, correct=True, candidate_ms=1.0, eager_ms=speedup, speedup_eager=speedup)
        untimed = EpisodeResult("t", tier=1, correct=True, speedup_eager=speedup)
        profile = ProfileResult(Stage.PROFILE, Status.OK, candidate_ms=1.0, eager_ms=speedup, compile_ms=100.0)
        assert timed.faster_than("eager") is faster
        assert untimed.faster_than("eager") is faster
        assert (milestone_tier(True, profile) >= 2) is faster
    assert not EpisodeResult("t", correct=False, speedup_eager=3.0).faster_than("eager")


def test_edge_cases() -> None:
    assert geometric_mean([]) is None
    assert geometric_mean([1e300, 1e300, 1e-300]) == pytest.approx(1e100)  # log space: no overflow
    assert fast_p([], 0, 1.0) == 0.0
    m = compute_metrics([], task_ids=["a", "b"])
    assert (m.n, m.missing, m.pass_rate, m.mean_tier) == (2, 2, 0.0, -1.0)
    assert m.geomean_speedup_eager is None and m.fast_p_eager[0.0] == 0.0
    empty = compute_metrics([])
    assert empty.n == 0 and empty.pass_rate == 0.0
    # a correct result without a measured speedup counts as correct but for no fast_p threshold
    r = EpisodeResult("a", tier=1, correct=True, speedup_eager=math.nan)
    m = compute_metrics([r])
    assert m.pass_rate == 1.0 and m.fast_p_eager[0.0] == 0.0 and m.geomean_speedup_eager is None


def test_bad_lines_are_reported_with_their_number(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"task_id": "a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"r.jsonl:2"):
        read_results(path)
    path.write_text('{"tier": 1}\n')
    with pytest.raises(ValueError, match="task_id"):
        read_results(path)
    assert read_results(tmp_path / "absent.jsonl") == []
    r = EpisodeResult.from_json({"task_id": "a", "tier": 2, "future_field": 1})
    assert r.tier == 2 and EpisodeResult.from_json(r.to_json()) == r
