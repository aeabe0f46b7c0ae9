"""The execution filters, each with a task it must drop and one it must keep, in the trusted reference process."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.synth.filters import ExecutionFilter, FilterConfig, verdict_of_check
from cudagym.synth.memory_budget import MemoryBudget
from cudagym.synth.pipeline import synth_task
from cudagym.synth.records import FILTER_PHASES, Candidate, DropReason, Verdict
from cudagym.tasks.checks import TaskCheck

TEMPLATE = """import torch
import torch.nn as nn

n = {n}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
{body}


def get_inputs():
    return [torch.randn(n, n)]


def get_init_inputs():
    return []
"""

KEEP = "        return torch.tanh(x @ x)"
DROPS = {
    DropReason.DOES_NOT_EXECUTE: "        return x @ torch.ones(3, 5)",
    DropReason.NONDETERMINISTIC: "        return x + torch.rand_like(x)",
    DropReason.NOT_FINITE: "        return torch.log(-x.abs() - 1)",
    DropReason.DEGENERATE: "        return torch.tanh(x) * 0",
}


def _task(body: str, n: int = 96, index: int = 0):
    code = TEMPLATE.format(n=n, body=body)
    return synth_task(Candidate(index, 0, code, ("torch.tanh",), "torch#1", ((n, n),)))


@pytest.fixture(scope="module")
def judge(synth_filters: FilterConfig, cache_dir: Path) -> Iterator[ExecutionFilter]:
    wide = dataclasses.replace(synth_filters, min_ms=1e-4, max_ms=1e4)  # the window is tested on its own below
    found = ExecutionFilter(resolve_backend("cpu"), wide, cache_dir)
    yield found
    found.close()


def test_a_sound_task_is_kept_with_its_eager_time(judge: ExecutionFilter) -> None:
    verdict = judge.judge(_task(KEEP))
    assert verdict.passed, verdict.detail
    assert verdict.eager_ms is not None and verdict.eager_ms > 0


@pytest.mark.parametrize("reason", list(DROPS), ids=[r.value for r in DROPS])
def test_each_check_drops_its_task(judge: ExecutionFilter, reason: DropReason) -> None:
    verdict = judge.judge(_task(DROPS[reason]))
    assert verdict.reason is reason, verdict.detail


def test_the_time_window(synth_filters: FilterConfig, cache_dir: Path) -> None:
    ok = TaskCheck("t", deterministic=True, finite=True, eager_ms=5.0)
    assert verdict_of_check(ok, synth_filters).passed
    assert verdict_of_check(dataclasses.replace(ok, eager_ms=0.01), synth_filters).reason is DropReason.TOO_FAST
    assert verdict_of_check(dataclasses.replace(ok, eager_ms=500.0), synth_filters).reason is DropReason.TOO_SLOW
    measured = ExecutionFilter(resolve_backend("cpu"), synth_filters, cache_dir)
    try:
        verdict = measured.judge(_task("        return torch.tanh(x)", n=4))
    finally:
        measured.close()
    assert verdict.reason is DropReason.TOO_FAST and verdict.eager_ms is not None and verdict.eager_ms < 0.5


def test_torch_compile_filter(synth_filters: FilterConfig, cache_dir: Path) -> None:
    config = dataclasses.replace(synth_filters, min_ms=1e-4, max_ms=1e4, check_compile=True)
    compiling = ExecutionFilter(resolve_backend("cpu"), config, cache_dir)
    # under torch.compile only, a call whose shapes do not fit: the tracer's fake tensors refuse it
    refuses = (
        "        if torch.compiler.is_compiling():\n"
        "            return torch.ops.aten.native_layer_norm(x, [7], None, None, 1e-5)[0]\n" + KEEP
    )
    try:
        kept = compiling.judge(_task(KEEP, n=32))
        dropped = compiling.judge(_task(refuses, n=32))
    finally:
        compiling.close()
    assert kept.passed and kept.compile_ms is not None and kept.compile_ms > 0, kept.detail
    assert dropped.reason is DropReason.COMPILE_FAILS, dropped
    # where the time went (synth_rate.py's phase table): both phases, each at least its own slot waits
    for verdict in (kept, dropped):
        assert set(verdict.seconds) <= set(FILTER_PHASES)
        for phase in ("check", "compile", "timing"):
            assert verdict.seconds[phase] >= verdict.seconds[f"{phase}_wait"] >= 0
    assert kept.seconds["check"] > 0 and kept.seconds["compile"] > 0 and kept.seconds["timing"] > 0


def test_a_candidate_holds_the_exclusive_slot_once_for_both_timings(
    synth_filters: FilterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each exclusive hold stalls every other worker's device work until the shared holders drain: a candidate takes
    one, for eager and torch.compile together, after its checks and its input set in the shared slot (torch.compile's
    first run takes the shared slot inside the reference process, after its code generation:
    ``tests/test_reference_process.py``); a candidate the checks drop takes none."""
    from cudagym.gpu_lock import read_journal

    journal = tmp_path / "slots.jsonl"
    monkeypatch.setenv("CUDAGYM_TIMING_LOCK", "1")  # the cpu backend's slots lock only when asked
    monkeypatch.setenv("CUDAGYM_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDAGYM_TIMING_JOURNAL", str(journal))
    config = dataclasses.replace(synth_filters, min_ms=1e-4, max_ms=1e4, check_compile=True)
    judge = ExecutionFilter(resolve_backend("cpu"), config, tmp_path / "cache")
    try:
        kept = judge.judge(_task(KEEP, n=32, index=11))
        held = [(entry["label"], entry["mode"]) for entry in read_journal(journal)]
        dropped = judge.judge(_task(DROPS[DropReason.DEGENERATE], n=32, index=12))
        after_drop = [(entry["label"], entry["mode"]) for entry in read_journal(journal)][len(held) :]
    finally:
        judge.close()
    assert kept.passed and kept.eager_ms and kept.compile_ms, kept
    assert held == [("synth check", "shared"), ("synth inputs", "shared"), ("synth timing", "exclusive")]
    assert dropped.reason is DropReason.DEGENERATE
    assert after_drop == [("synth check", "shared")]


def test_bad_windows_are_refused() -> None:
    with pytest.raises(ValueError, match="min_ms < max_ms"):
        FilterConfig(min_ms=5, max_ms=1)


def test_a_task_that_ran_out_of_device_memory_is_checked_again_once(
    judge: ExecutionFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cudagym.synth.filters as filters

    real = filters.check_task
    calls: list[str] = []
    error = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."

    def short_of_memory_once(task, *args, **kwargs) -> TaskCheck:
        calls.append(task.id)
        if len(calls) == 1:  # another worker's tensors held the device
            return TaskCheck(task.id, error=error)
        return real(task, *args, **kwargs)

    monkeypatch.setattr(filters, "check_task", short_of_memory_once)
    verdict = judge.judge(_task(KEEP, index=7))
    assert verdict.passed and len(calls) == 2, verdict
    # twice short of memory: dropped for that, not as a task that does not execute
    monkeypatch.setattr(filters, "check_task", lambda task, *a, **k: TaskCheck(task.id, error=error))
    verdict = judge.judge(_task(KEEP, index=8))
    assert verdict.reason is DropReason.OUT_OF_MEMORY and "out of memory" in verdict.detail


def test_with_a_budget_a_task_holds_its_footprint_and_is_judged_again_alone(
    judge: ExecutionFilter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers share the device's memory: a judgement holds its footprint of the budget; a task that runs out of
    memory all the same (another worker's tensors, or a footprint guessed too small) is judged once more holding the
    whole budget, and is dropped for memory only when it runs out alone."""
    import cudagym.synth.filters as filters

    budget = MemoryBudget(100)
    monkeypatch.setattr(judge, "budget", budget)
    real = filters.check_task
    held: list[int] = []
    error = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."

    def noting(task, *args, **kwargs) -> TaskCheck:
        held.append(budget.held)
        return real(task, *args, **kwargs)

    monkeypatch.setattr(filters, "check_task", noting)
    verdict = judge.judge(_task(KEEP, index=9), footprint=30)
    assert verdict.passed and held == [30] and budget.held == 0, verdict
    assert verdict.seconds["memory_wait"] >= 0

    def short_of_memory_beside_others(task, *args, **kwargs) -> TaskCheck:
        held.append(budget.held)
        if budget.held < budget.capacity:
            return TaskCheck(task.id, error=error)
        return real(task, *args, **kwargs)

    held.clear()
    monkeypatch.setattr(filters, "check_task", short_of_memory_beside_others)
    verdict = judge.judge(_task(KEEP, index=10), footprint=30)
    assert verdict.passed and held == [30, 100], verdict  # kept: it fits the device alone
    held.clear()
    monkeypatch.setattr(
        filters, "check_task", lambda task, *a, **k: held.append(budget.held) or TaskCheck(task.id, error=error)
    )
    verdict = judge.judge(_task(KEEP, index=11), footprint=30)
    assert held == [30, 100] and verdict.reason is DropReason.OUT_OF_MEMORY, verdict
    assert "no other candidate" in verdict.detail and "out of memory" in verdict.detail
    assert budget.held == 0


def test_a_verdict_judged_twice_carries_the_time_of_both() -> None:
    """The second verdict decides (a rescaled candidate, a check repeated after running out of memory); the seconds of
    both were spent, and they take no part in comparing verdicts."""
    first = Verdict(DropReason.TOO_FAST, "eager 0.1 ms", 0.1, seconds={"check": 1.5, "check_wait": 0.5})
    second = Verdict(eager_ms=3.0, seconds={"check": 2.0, "compile": 4.0})
    both = second.adding(first.seconds)
    assert both.passed and both.eager_ms == 3.0
    assert both.seconds == {"check": 3.5, "compile": 4.0, "check_wait": 0.5}
    assert both == Verdict(eager_ms=3.0)
