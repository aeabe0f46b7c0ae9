"""Benchmark metrics over one evaluation run: the numbers of CUDA Agent's Table 1 and KernelBench's fast_p.

One :class:`EpisodeResult` per task (a line of the results JSONL). Over a run of ``n`` problems
(:func:`compute_metrics`; a problem without a result counts as incorrect, KernelBench's convention):

* **pass rate**: correct / n. Correct means the submit compiled and passed verification (and no
  integrity check failed): the milestone tier is >= 1. An episode without a submit is not correct.
* **faster than eager / torch.compile**: correct and more than 5% faster than that baseline, by CUDA
  Agent's b(t, t0) = (t0 - t) / t0 > 0.05 (``cudagym.results.is_faster``, the test the milestone tier uses),
  over n. In speedup terms (speedup s = t0 / t) that is s > 1 / 0.95 = 1.0526..., not s > 1.05. Faster than
  eager is exactly tier >= 2; faster than torch.compile counts on its own (tier 3 needs both).
* **geometric mean speedups** vs eager and vs torch.compile over the correct results with a measured
  speedup (KernelBench's ``geometric_mean_speed_ratio_correct_only``, computed in log space); None when
  there is none.
* **fast_p** (KernelBench ``score.fastp``): count(correct and speedup > p) / n with a strict ``>``, for
  p in ``FAST_P_THRESHOLDS``, vs eager and vs torch.compile. fast_0 is the pass rate when every correct
  result was timed.

All rates are fractions in [0, 1].
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from cudagym.results import SPEEDUP_MARGIN, is_faster

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
"""KernelBench's reported thresholds."""

TIERS: tuple[int, ...] = (-1, 1, 2, 3)

Baseline = Literal["eager", "compile"]

STOP_REASONS = ("submitted", "truncated", "agent_stopped", "error")
"""How an episode ended: ``submit`` ran; the environment's turn budget ran out; the agent stopped on its
own (script finished, token budget spent); or something failed (an exception in the environment, the
agent or its API), so the episode says nothing about the agent and ``--resume`` plays it again."""


@dataclasses.dataclass(frozen=True)
class EpisodeResult:
    """What one episode of one task came to (one line of the results JSONL).

    Attributes:
        task_id: the task.
        tier: the milestone tier of the submit (-1, 1, 2 or 3); -1 when there was no submit.
        reward: the sum of the episode's rewards (with the default reward: the tier at submit, else 0).
        submitted: ``submit`` ran (the episode terminated).
        compiled: the submit compiled.
        correct: the submit was correct (tier >= 1).
        candidate_ms: the candidate's median time at submit, in milliseconds (None when not timed).
        eager_ms: eager PyTorch's median time, in milliseconds.
        compile_ms: ``torch.compile``'s median time, in milliseconds.
        speedup_eager: eager_ms / candidate_ms (> 1 is faster).
        speedup_compile: compile_ms / candidate_ms.
        turns: actions taken.
        seconds: wall-clock seconds of the episode.
        stop_reason: one of ``STOP_REASONS``.
        stop_detail: why the agent stopped or what failed, in words (empty when it submitted).
        error: the failure when ``stop_reason`` is ``"error"`` (``Type: message``), else empty.
        agent: the agent's name.
        backend: the backend's name.
        tokens: tokens the agent used, when it counts them.
        submit_status: the submit result's status (``"ok"``, ``"compile_error"``, ``"mismatch"``, ...).
    """

    task_id: str
    tier: int = -1
    reward: float = 0.0
    submitted: bool = False
    compiled: bool = False
    correct: bool = False
    candidate_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    turns: int = 0
    seconds: float = 0.0
    stop_reason: str = "submitted"
    stop_detail: str = ""
    error: str = ""
    agent: str = ""
    backend: str = ""
    tokens: int | None = None
    submit_status: str = ""

    @property
    def finished(self) -> bool:
        """The episode says something about the agent (it did not end in an error)."""
        return self.stop_reason != "error"

    def speedup(self, baseline: Baseline) -> float | None:
        """The speedup vs ``"eager"`` or ``"compile"`` (baseline time / candidate time), when measured."""
        value = self.speedup_eager if baseline == "eager" else self.speedup_compile
        return value if value is not None and math.isfinite(value) and value > 0 else None

    def faster_than(self, baseline: Baseline, margin: float = SPEEDUP_MARGIN) -> bool:
        """Correct and more than ``margin`` faster than the baseline: (t0 - t) / t0 > margin.

        The milestone tier's own test on the times when both are known; else the same inequality on the
        speedup (1 - 1 / speedup > margin).
        """
        if not self.correct:
            return False
        baseline_ms = self.eager_ms if baseline == "eager" else self.compile_ms
        if self.candidate_ms is not None and baseline_ms is not None:
            return is_faster(self.candidate_ms, baseline_ms, margin)
        speedup = self.speedup(baseline)
        return speedup is not None and 1.0 - 1.0 / speedup > margin

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object (one line of the results file)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpisodeResult:
        """Reads :meth:`to_json`'s output; unknown keys are ignored, missing ones take their defaults."""
        names = {f.name for f in dataclasses.fields(cls)}
        if "task_id" not in data:
            raise ValueError(f"a result needs a task_id: {dict(data)!r}")
        return cls(**{k: v for k, v in data.items() if k in names})


def read_results(path: str | Path) -> list[EpisodeResult]:
    """The results of a JSONL file, in file order (blank lines skipped; a missing file gives none).

    Raises:
        ValueError: a line is not a JSON result (with its line number).
    """
    path = Path(path)
    if not path.exists():
        return []
    results = []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                results.append(EpisodeResult.from_json(json.loads(line)))
            except (ValueError, TypeError) as e:
                raise ValueError(f"{path}:{number}: not a result line: {e}") from None
    return results


def latest_by_task(results: Iterable[EpisodeResult]) -> dict[str, EpisodeResult]:
    """One result per task id: the last one (a resumed run appends retried tasks after their errors)."""
    latest: dict[str, EpisodeResult] = {}
    for result in results:
        latest.pop(result.task_id, None)
        latest[result.task_id] = result
    return latest


@dataclasses.dataclass(frozen=True)
class Metrics:
    """The metrics of one run over ``n`` problems (see the module doc; rates are fractions of ``n``).

    Attributes:
        n: problems in the run (results for other tasks are ignored; missing ones count as incorrect).
        evaluated: problems with a result.
        missing: problems without a result.
        submitted: problems whose episode submitted.
        compiled: problems whose submit compiled.
        correct: problems whose submit was correct.
        errors: problems whose episode ended in an error.
        faster_than_eager: correct and more than 5% faster than eager.
        faster_than_compile: correct and more than 5% faster than torch.compile.
        tier_counts: tier -> problems with that tier (missing ones not included).
        pass_rate: correct / n.
        compile_rate: compiled / n.
        faster_than_eager_rate: faster_than_eager / n.
        faster_than_compile_rate: faster_than_compile / n.
        geomean_speedup_eager: geometric mean speedup vs eager over correct, timed results (None: none).
        geomean_speedup_compile: the same vs torch.compile.
        timed_correct: correct results with a measured speedup vs eager (the eager geomean's sample).
        fast_p_eager: p -> fast_p vs eager.
        fast_p_compile: p -> fast_p vs torch.compile.
        mean_tier: the mean tier over n, missing problems as -1.
        mean_turns: the mean number of actions over the evaluated problems.
        total_seconds: the episodes' wall-clock seconds added up.
        total_tokens: tokens used, where the agent counts them (None: it does not).
        margin: the "faster" margin (0.05).
    """

    n: int
    evaluated: int
    missing: int
    submitted: int
    compiled: int
    correct: int
    errors: int
    faster_than_eager: int
    faster_than_compile: int
    tier_counts: Mapping[int, int]
    pass_rate: float
    compile_rate: float
    faster_than_eager_rate: float
    faster_than_compile_rate: float
    geomean_speedup_eager: float | None
    geomean_speedup_compile: float | None
    timed_correct: int
    fast_p_eager: Mapping[float, float]
    fast_p_compile: Mapping[float, float]
    mean_tier: float
    mean_turns: float
    total_seconds: float
    total_tokens: int | None
    margin: float = SPEEDUP_MARGIN

    def to_json(self) -> dict[str, Any]:
        """The metrics as a JSON object (mapping keys become strings)."""
        data = dataclasses.asdict(self)
        for key in ("tier_counts", "fast_p_eager", "fast_p_compile"):
            data[key] = {str(k): v for k, v in data[key].items()}
        return data


def geometric_mean(values: Sequence[float]) -> float | None:
    """The geometric mean of positive values, in log space (no overflow); None for an empty sequence."""
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fast_p(results: Iterable[EpisodeResult], n: int, p: float, baseline: Baseline = "eager") -> float:
    """KernelBench's fast_p: count(correct and speedup > p) / n (strict ``>``; unmeasured speedups fail)."""
    if n <= 0:
        return 0.0
    count = 0
    for result in results:
        speedup = result.speedup(baseline)
        if result.correct and speedup is not None and speedup > p:
            count += 1
    return count / n


def compute_metrics(
    results: Iterable[EpisodeResult],
    *,
    task_ids: Sequence[str] | None = None,
    thresholds: Sequence[float] = FAST_P_THRESHOLDS,
    margin: float = SPEEDUP_MARGIN,
) -> Metrics:
    """The metrics of a run (see the module doc).

    Args:
        results: the run's results; where a task has several, the last one counts.
        task_ids: the run's problems; None: every task with a result. Results of other tasks are ignored
            and problems without a result count as incorrect.
        thresholds: the p of fast_p.
        margin: the "faster" margin of the tiers.
    """
    latest = latest_by_task(results)
    ids = list(dict.fromkeys(task_ids)) if task_ids is not None else list(latest)
    present = [latest[i] for i in ids if i in latest]
    n = len(ids)

    def rate(count: int) -> float:
        return count / n if n else 0.0

    correct = [r for r in present if r.correct]
    eager = [s for r in correct if (s := r.speedup("eager")) is not None]
    compile_ = [s for r in correct if (s := r.speedup("compile")) is not None]
    faster_eager = sum(r.faster_than("eager", margin) for r in present)
    faster_compile = sum(r.faster_than("compile", margin) for r in present)
    tiers = {tier: sum(r.tier == tier for r in present) for tier in TIERS}
    compiled = sum(r.compiled for r in present)
    tokens = [r.tokens for r in present if r.tokens is not None]
    missing = n - len(present)
    return Metrics(
        n=n,
        evaluated=len(present),
        missing=missing,
        submitted=sum(r.submitted for r in present),
        compiled=compiled,
        correct=len(correct),
        errors=sum(not r.finished for r in present),
        faster_than_eager=faster_eager,
        faster_than_compile=faster_compile,
        tier_counts=tiers,
        pass_rate=rate(len(correct)),
        compile_rate=rate(compiled),
        faster_than_eager_rate=rate(faster_eager),
        faster_than_compile_rate=rate(faster_compile),
        geomean_speedup_eager=geometric_mean(eager),
        geomean_speedup_compile=geometric_mean(compile_),
        timed_correct=len(eager),
        fast_p_eager={float(p): fast_p(present, n, p, "eager") for p in thresholds},
        fast_p_compile={float(p): fast_p(present, n, p, "compile") for p in thresholds},
        mean_tier=(sum(r.tier for r in present) - missing) / n if n else 0.0,
        mean_turns=sum(r.turns for r in present) / len(present) if present else 0.0,
        total_seconds=sum(r.seconds for r in present),
        total_tokens=sum(tokens) if tokens else None,
        margin=margin,
    )
