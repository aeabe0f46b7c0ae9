"""The evaluation report: metrics as Markdown, and PNG plots of the speedup distribution and fast_p curve
(drawn by :mod:`cudagym.plots`).

Separate from the runner (:mod:`cudagym.evaluation`) so that a results file can be reported on its own
(``cudagym eval-report``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from cudagym.metrics import EpisodeResult, Metrics, compute_metrics, latest_by_task
from cudagym.plots import plot_fast_p, plot_speedups

__all__ = [
    "FAST_P_PLOT",
    "METRICS_NAME",
    "REPORT_NAME",
    "SPEEDUP_PLOT",
    "Report",
    "format_report",
    "format_summary",
    "plot_fast_p",
    "plot_speedups",
    "write_report",
]

REPORT_NAME = "report.md"
METRICS_NAME = "metrics.json"
SPEEDUP_PLOT = "speedup_hist.png"
FAST_P_PLOT = "fast_p.png"


@dataclasses.dataclass(frozen=True)
class Report:
    """The files :func:`write_report` wrote.

    Attributes:
        markdown: the Markdown report.
        metrics: the metrics as JSON.
        plots: the PNG plots (empty without matplotlib).
        note: why plots are missing, when they are.
    """

    markdown: Path
    metrics: Path
    plots: tuple[Path, ...] = ()
    note: str = ""


def _pct(rate: float) -> str:
    return f"{100 * rate:.1f}%"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}x"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def format_summary(metrics: Metrics) -> str:
    """The summary table (Markdown): rates, geometric means, tiers, and fast_p vs both baselines."""
    m = metrics
    n = m.n
    tiers = " / ".join(str(m.tier_counts.get(t, 0)) for t in (-1, 1, 2, 3))
    rows = [
        ("problems", f"{n} ({m.evaluated} evaluated, {m.missing} missing)"),
        ("pass rate (correct)", f"{_pct(m.pass_rate)} ({m.correct}/{n})"),
        ("compiled", f"{_pct(m.compile_rate)} ({m.compiled}/{n})"),
        (f"faster than eager (>{m.margin:.0%})", f"{_pct(m.faster_than_eager_rate)} ({m.faster_than_eager}/{n})"),
        (
            f"faster than torch.compile (>{m.margin:.0%})",
            f"{_pct(m.faster_than_compile_rate)} ({m.faster_than_compile}/{n})",
        ),
        ("geomean speedup vs eager (correct)", f"{_x(m.geomean_speedup_eager)} (over {m.timed_correct})"),
        ("geomean speedup vs torch.compile (correct)", _x(m.geomean_speedup_compile)),
        ("tiers -1 / 1 / 2 / 3", tiers),
        ("mean tier (missing as -1)", f"{m.mean_tier:.3g}"),
        ("submitted", f"{m.submitted}/{n}"),
        ("episodes ended in an error", str(m.errors)),
        ("mean turns", f"{m.mean_turns:.3g}"),
        ("episode time (sum)", f"{m.total_seconds:.1f} s"),
    ]
    if m.total_tokens is not None:
        rows.append(("tokens", str(m.total_tokens)))
    lines = ["| metric | value |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in rows]
    lines += [
        "",
        f"fast_p (KernelBench): correct and speedup > p (strict), over all {n} problems.",
        "",
        "| p | vs eager | vs torch.compile |",
        "| --- | --- | --- |",
    ]
    for p in m.fast_p_eager:
        lines.append(f"| {p:g} | {_pct(m.fast_p_eager[p])} | {_pct(m.fast_p_compile.get(p, 0.0))} |")
    return "\n".join(lines)


def format_report(
    results: Sequence[EpisodeResult],
    *,
    task_ids: Sequence[str] | None = None,
    title: str = "",
    plots: Sequence[str] = (),
) -> str:
    """The whole Markdown report: the summary (:func:`format_summary`), the plots, then one row per problem."""
    metrics = compute_metrics(results, task_ids=task_ids)
    latest = latest_by_task(results)
    ids = list(task_ids) if task_ids is not None else list(latest)
    agents = sorted({r.agent for r in latest.values() if r.agent})
    backends = sorted({r.backend for r in latest.values() if r.backend})
    heading = title or f"cudagym evaluation: {', '.join(agents) or 'agent'} on {metrics.n} tasks"
    lines = [f"# {heading}", ""]
    if backends:
        lines += [f"Backend: {', '.join(backends)}. Definitions: `cudagym.metrics`.", ""]
    lines += [format_summary(metrics), ""]
    for plot in plots:
        lines += [f"![{Path(plot).stem}]({Path(plot).name})", ""]
    lines += [
        "## Per task",
        "",
        "| task | tier | correct | vs eager | vs torch.compile | candidate ms | eager ms | compile ms | turns | s "
        "| end |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task_id in ids:
        r = latest.get(task_id)
        if r is None:
            lines.append(f"| {_cell(task_id)} | | | | | | | | | | missing |")
            continue
        end = r.stop_reason if not (r.error or r.stop_detail) else f"{r.stop_reason}: {r.error or r.stop_detail}"
        lines.append(
            f"| {_cell(task_id)} | {r.tier} | {'yes' if r.correct else 'no'} | {_x(r.speedup('eager'))} | "
            f"{_x(r.speedup('compile'))} | {_ms(r.candidate_ms)} | {_ms(r.eager_ms)} | {_ms(r.compile_ms)} | "
            f"{r.turns} | {r.seconds:.1f} | {_cell(end[:200])} |"
        )
    return "\n".join(lines) + "\n"


def write_report(
    results: Sequence[EpisodeResult],
    report_dir: str | Path,
    *,
    task_ids: Sequence[str] | None = None,
    title: str = "",
    plots: bool = True,
) -> Report:
    """Writes ``report.md``, ``metrics.json`` and (with matplotlib) the two plots into ``report_dir``.

    Without matplotlib the report is written without plots and ``Report.note`` says so.
    """
    folder = Path(report_dir)
    folder.mkdir(parents=True, exist_ok=True)
    metrics = compute_metrics(results, task_ids=task_ids)
    written: list[Path] = []
    note = ""
    if plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            note = "matplotlib is not installed; plots skipped (pip install matplotlib)"
        else:
            latest = list(latest_by_task(results).values())
            if task_ids is not None:
                wanted = set(task_ids)
                latest = [r for r in latest if r.task_id in wanted]
            written.append(plot_speedups(latest, folder / SPEEDUP_PLOT))
            written.append(plot_fast_p(latest, metrics.n, folder / FAST_P_PLOT))
    markdown = folder / REPORT_NAME
    markdown.write_text(format_report(results, task_ids=task_ids, title=title, plots=[p.name for p in written]))
    metrics_path = folder / METRICS_NAME
    metrics_path.write_text(json.dumps(metrics.to_json(), indent=2) + "\n")
    return Report(markdown=markdown, metrics=metrics_path, plots=tuple(written), note=note)
