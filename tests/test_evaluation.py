"""The evaluation harness: ``cudagym eval`` on real episodes, the runner's bookkeeping on a fake env, the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from cudagym.baselines.agents import ScriptedPlayer
from cudagym.eval_cli import main as eval_main
from cudagym.evaluation import (
    FAST_P_PLOT,
    QUICK_EVAL_CONFIG,
    SPEEDUP_PLOT,
    EvalRun,
    evaluate,
    format_report,
    read_trajectories,
    write_report,
)
from cudagym.metrics import EpisodeResult, read_results
from cudagym.tasks import Task, TaskSet
from cudagym.tools import ParseFailure, Submit, parse_action

REAL_IDS = ["builtin/relu", "builtin/scale_bias_tanh"]


def test_quick_config_is_the_test_config(fast_config) -> None:
    # the same settings key the same cached baselines, so the CLI below reuses the suite's cache
    assert QUICK_EVAL_CONFIG == fast_config


def test_cli_eval_scripted_reproduces_reference_tiers_then_resumes(tmp_path: Path, capsys) -> None:
    out, traj, report = tmp_path / "results.jsonl", tmp_path / "traj.jsonl", tmp_path / "report"
    argv = ["eval", "--agent", "scripted", "--ids", *REAL_IDS, "--backend", "cpu", "--quick", "--direct-submit",
            "--workers", "2", "--out", str(out), "--no-progress"]  # fmt: skip
    assert eval_main([*argv, "--trajectories", str(traj), "--report-dir", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "2 played, 0 already done" in printed and "| pass rate (correct) | 100.0% (2/2) |" in printed
    results = {r.task_id: r for r in read_results(out)}
    assert sorted(results) == sorted(REAL_IDS)
    for r in results.values():
        assert r.submitted and r.compiled and r.correct and r.tier >= 1, r
        assert r.agent == "scripted" and r.backend == "cpu" and r.stop_reason == "submitted"
        assert r.candidate_ms and r.eager_ms and r.compile_ms and r.speedup_eager and r.speedup_compile
        assert r.speedup_eager == pytest.approx(r.eager_ms / r.candidate_ms, rel=1e-6)
        assert r.turns >= 3 and r.seconds > 0
    assert (report / "report.md").exists() and json.loads((report / "metrics.json").read_text())["correct"] == 2
    trajectories = read_trajectories(traj)
    assert {t.task_id for t in trajectories} == set(REAL_IDS)
    assert all(t.reward >= 1 and isinstance(parse_action(t.steps[-1].action), Submit) for t in trajectories)

    before = out.read_text()
    assert eval_main([*argv, "--resume"]) == 0  # both tasks are finished: nothing is played
    assert "0 played, 2 already done" in capsys.readouterr().out
    assert out.read_text() == before

    rft = tmp_path / "rft.jsonl"
    assert eval_main(["rft-export", str(traj), str(rft)]) == 0
    assert "2 of 2 trajectories written" in capsys.readouterr().out
    lines = [json.loads(line) for line in rft.read_text().splitlines()]
    assert len(lines) == 2 and all(line["messages"][0]["role"] == "system" for line in lines)

    assert eval_main(["eval-report", str(out), "--report-dir", str(tmp_path / "again")]) == 0
    summary = (tmp_path / "again" / "report.md").read_text().split("## Per task")[0]
    assert summary == (report / "report.md").read_text().split("## Per task")[0]


# -- the runner on a fake environment (no processes, milliseconds) ------------------------------------------


class FakeBackend:
    name = "fake"


class FakeEnv(gym.Env):
    """Terminates at ``submit`` with the tier in ``TIERS``; raises on the task ``fake/raises``."""

    TIERS = {"fake/a": 3, "fake/b": 1, "fake/c": -1}
    made = 0

    def __init__(self, tasks: TaskSet) -> None:
        FakeEnv.made += 1
        self.tasks = tasks
        self.backend = FakeBackend()
        self.task_id = ""
        self.closed = False

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        self.task_id = (options or {})["task_id"]
        return "instructions\n## model.py\nsource", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.task_id == "fake/raises":
            raise RuntimeError("the harness broke")
        call = parse_action(action)
        if isinstance(call, ParseFailure):
            return "bad call", 0.0, False, False, {"tool": "", "status": "invalid_call"}
        if not isinstance(call, Submit):
            return "ok", 0.0, False, False, {"tool": call.tool_name(), "status": "ok"}
        tier = self.TIERS[self.task_id]
        profile = {"candidate_ms": 1.0, "eager_ms": 2.0, "compile_ms": 1.5} if tier > 0 else None
        info = {"tool": "submit", "status": "ok" if tier > 0 else "mismatch", "tier": tier, "compiled": True,
                "correct": tier > 0, "speedup_eager": 2.0 if tier > 0 else None,
                "speedup_compile": 1.5 if tier > 0 else None, "result": {"profile": profile}}  # fmt: skip
        return f"tier {tier}", float(tier), True, False, info

    def close(self) -> None:
        self.closed = True


class Submitter:
    """Lists files, then submits; on ``fake/quits`` it stops at once, reporting why."""

    name = "submitter"

    def reset(self, task: Task, backend: str, observation: str) -> None:
        self.task, self.turn = task, 0

    def act(self, observation: str) -> str | None:
        if self.task.id == "fake/quits":
            return None
        self.turn += 1
        return '{"name": "list_files", "arguments": {}}' if self.turn == 1 else '{"name": "submit", "arguments": {}}'

    def episode_stats(self) -> dict[str, Any]:
        return {"stop_reason": "nothing to do", "tokens": 7} if self.task.id == "fake/quits" else {"tokens": 5}


def fake_tasks(*names: str) -> TaskSet:
    return TaskSet("fake", [Task(f"fake/{n}", n, "source") for n in names])


def run_fake(tasks: TaskSet, out: Path, **kwargs: Any) -> EvalRun:
    return evaluate(tasks, Submitter, env_factory=FakeEnv, out=out, progress=False, **kwargs)


def test_runner_records_every_ending_and_resume_replays_only_errors(tmp_path: Path) -> None:
    out, traj = tmp_path / "r.jsonl", tmp_path / "t.jsonl"
    tasks = fake_tasks("a", "raises", "b", "quits", "c")
    FakeEnv.made = 0
    run = run_fake(tasks, out, trajectories=traj)
    by_id = {r.task_id: r for r in run.results}
    assert [r.task_id for r in run.results] == list(tasks.ids)  # task order, whatever finished first
    assert (run.played, run.skipped, run.interrupted) == (5, 0, False)
    assert by_id["fake/a"].tier == 3 and by_id["fake/a"].speedup_eager == 2.0 and by_id["fake/a"].turns == 2
    assert by_id["fake/a"].tokens == 5 and by_id["fake/a"].agent == "submitter" and by_id["fake/a"].backend == "fake"
    assert by_id["fake/c"].tier == -1 and by_id["fake/c"].submitted and not by_id["fake/c"].correct
    raised = by_id["fake/raises"]
    assert raised.stop_reason == "error" and raised.error == "RuntimeError: the harness broke" and not raised.finished
    quits = by_id["fake/quits"]
    assert (quits.stop_reason, quits.stop_detail, quits.tier, quits.tokens) == ("agent_stopped", "nothing to do", -1, 7)
    assert FakeEnv.made == 2  # one env for the worker's tasks, rebuilt after the episode that raised
    assert run.metrics.correct == 2 and run.metrics.errors == 1
    assert len(read_results(out)) == 5 and len(read_trajectories(traj)) == 4  # an errored episode has none

    more = fake_tasks("a", "raises", "b", "quits", "c", "d")
    FakeEnv.TIERS["fake/d"] = 2
    try:
        again = run_fake(more, out, resume=True, trajectories=traj)
    finally:
        del FakeEnv.TIERS["fake/d"]
    assert (again.played, again.skipped) == (2, 4)  # "raises" is played again, "d" is new
    lines = read_results(out)
    assert [r.task_id for r in lines[5:]] == ["fake/raises", "fake/d"]
    assert len(again.results) == 6 and again.metrics.n == 6 and again.metrics.correct == 3

    with pytest.raises(ValueError, match="agent 'submitter', not 'scripted'"):
        evaluate(more, ScriptedPlayer, env_factory=FakeEnv, out=out, resume=True, progress=False)
    fresh = run_fake(fake_tasks("a"), out)  # without resume the file starts over
    assert fresh.played == 1 and len(read_results(out)) == 1


def test_progress_without_tqdm_prints_a_line_per_task(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm -> ImportError
    run = evaluate(
        fake_tasks("a", "b", "c"), Submitter, env_factory=FakeEnv, workers=2, progress=True, progress_stream=sys.stdout
    )
    assert [r.tier for r in run.results] == [3, 1, -1]
    printed = capsys.readouterr().out
    assert "[1/3] fake/" in printed and "[3/3] fake/" in printed and "tier" in printed
    with pytest.raises(ValueError, match="workers"):
        evaluate(fake_tasks("a"), Submitter, env_factory=FakeEnv, workers=0)


def sample_results() -> list[EpisodeResult]:
    return [
        EpisodeResult("x/fast", tier=3, submitted=True, compiled=True, correct=True, candidate_ms=1.0, eager_ms=3.0,
                      compile_ms=2.0, speedup_eager=3.0, speedup_compile=2.0, turns=12, seconds=30.0, agent="llm",
                      backend="cuda"),
        EpisodeResult("x/wrong", submitted=True, compiled=True, submit_status="mismatch", turns=5, agent="llm",
                      backend="cuda"),
        EpisodeResult("x|pipe", stop_reason="error", error="APIError: a | b", agent="llm", backend="cuda"),
    ]  # fmt: skip


def test_report_markdown_and_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    report = write_report(sample_results(), tmp_path / "rep", task_ids=["x/fast", "x/wrong", "x|pipe", "x/missing"])
    assert report.note == "" and [p.name for p in report.plots] == [SPEEDUP_PLOT, FAST_P_PLOT]
    for plot in report.plots:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = report.markdown.read_text()
    assert text.startswith("# cudagym evaluation: llm on 4 tasks")
    assert "| pass rate (correct) | 25.0% (1/4) |" in text and "| 1.5 | 25.0% | 25.0% |" in text
    assert "| 2 | 25.0% | 0.0% |" in text  # 3.0 > 2 vs eager; 2.0 is not > 2 vs torch.compile
    assert "| x/missing | | | | | | | | | | missing |" in text
    assert "x\\|pipe" in text and "error: APIError: a \\| b" in text
    assert f"![speedup_hist]({SPEEDUP_PLOT})" in text


def test_report_without_matplotlib_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    report = write_report(sample_results(), tmp_path / "rep")
    assert report.plots == () and "matplotlib is not installed" in report.note
    assert report.markdown.exists() and "![" not in report.markdown.read_text()
    assert format_report([]).startswith("# cudagym evaluation: agent on 0 tasks")


def test_cli_errors_are_one_line(tmp_path: Path, capsys) -> None:
    assert eval_main(["eval", "--agent", "scripted", "--ids", "builtin/nope", "--out", str(tmp_path / "r")]) == 1
    assert "unknown task ids" in capsys.readouterr().err
    assert eval_main(["eval", "--agent", "llm", "--ids", "builtin/relu", "--out", str(tmp_path / "r")]) == 1
    assert "--agent llm needs --model" in capsys.readouterr().err
    assert eval_main(["eval-report", str(tmp_path / "absent.jsonl")]) == 1
    assert "no results file" in capsys.readouterr().err
