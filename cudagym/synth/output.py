"""What a run leaves: the accepted tasks as a parquet in Ops-6K's schema, and a report of the stages.

``tasks.parquet`` has Ops-6K's columns ``code``, ``ops`` (a list of names) and ``data_source`` (``"torch#N"``, or
``"transformers#N"`` when a transformers block is in it), so ``cudagym.tasks.load("ops6k", path=...)`` and
``datasets.load_dataset("parquet", ...)`` read it, plus: ``shapes`` (the inputs' shapes as JSON), ``eager_ms`` and
``compile_ms`` (measured in the trusted reference process), ``device``, ``seed`` (the candidate's own),
``catalogue_version``, ``nearest_kernelbench`` and ``kernelbench_similarity``, ``origin`` (rule or llm) and ``index``.

``report.md`` and ``report.json`` count the candidates per stage and per drop reason; ``ops_per_task.png``,
``op_frequency.png`` and ``eager_ms.png`` are histograms of the accepted tasks.
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudagym.synth.records import DropReason, Outcome, Stage

logger = logging.getLogger(__name__)

PARQUET = "tasks.parquet"
TOP_OPS = 30


def rows(accepted: Sequence[Outcome], device: str, catalogue_version: str) -> list[dict[str, Any]]:
    """The parquet's rows, one per accepted outcome, in index order."""
    return [
        {
            "code": o.code,
            "ops": list(o.ops),
            "data_source": o.data_source,
            "shapes": json.dumps([list(shape) for shape in o.shapes]),
            "eager_ms": o.verdict.eager_ms,
            "compile_ms": o.verdict.compile_ms,
            "device": device,
            "seed": o.seed,
            "catalogue_version": catalogue_version,
            "nearest_kernelbench": o.verdict.nearest_kernelbench,
            "kernelbench_similarity": o.verdict.kernelbench_similarity,
            "origin": o.origin,
            "index": o.index,
        }
        for o in sorted(accepted, key=lambda o: o.index)
    ]


def write_parquet(path: Path, table_rows: list[dict[str, Any]]) -> Path:
    """Writes the rows with an explicit schema (so that an empty run still has every column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("code", pa.string()),
            ("ops", pa.list_(pa.string())),
            ("data_source", pa.string()),
            ("shapes", pa.string()),
            ("eager_ms", pa.float64()),
            ("compile_ms", pa.float64()),
            ("device", pa.string()),
            ("seed", pa.uint64()),
            ("catalogue_version", pa.string()),
            ("nearest_kernelbench", pa.string()),
            ("kernelbench_similarity", pa.float64()),
            ("origin", pa.string()),
            ("index", pa.int64()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(table_rows, schema=schema), path)
    return path


def stage_counts(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Candidates entering each stage, drops per reason, and the accepted count."""
    reasons = collections.Counter(o.verdict.reason.value for o in outcomes if o.verdict.reason is not None)
    entered: dict[str, int] = {}
    remaining = len(outcomes)
    for stage in Stage:
        entered[stage.value] = remaining
        remaining -= sum(n for r, n in reasons.items() if DropReason(r).stage == stage)
    return {
        "candidates": len(outcomes),
        "entered": entered,
        "dropped": dict(sorted(reasons.items())),
        "accepted": sum(o.accepted for o in outcomes),
    }


def write_report(out: Path, outcomes: Sequence[Outcome], accepted: Sequence[Outcome], title: str) -> dict[str, Any]:
    """Writes ``report.json``, ``report.md`` and the histograms; returns the report's data."""
    counts = stage_counts(outcomes)
    per_ops = collections.Counter(len(o.ops) for o in accepted)
    counts["ops_per_task"] = {str(k): per_ops[k] for k in sorted(per_ops)}
    counts["op_frequency"] = dict(collections.Counter(op for o in accepted for op in o.ops).most_common(TOP_OPS))
    (out / "report.json").write_text(json.dumps(counts, indent=1))
    lines = [f"# {title}", "", "| stage | candidates entering |", "|---|---|"]
    lines += [f"| {stage} | {n} |" for stage, n in counts["entered"].items()]
    lines += ["", "| drop reason | candidates |", "|---|---|"]
    lines += [f"| {reason} | {n} |" for reason, n in counts["dropped"].items()]
    lines += ["", f"Accepted: {len(accepted)} of {counts['candidates']} candidates.", ""]
    lines += ["| ops per task | tasks |", "|---|---|", *(f"| {k} | {n} |" for k, n in counts["ops_per_task"].items())]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    _histograms(out, accepted)
    return counts


def write_outputs(out: Path, outcomes: Sequence[Outcome], count: int, device: str, version: str) -> dict[str, Any]:
    """Writes the parquet of the first ``count`` accepted tasks (in index order) and the report; returns the
    report's data."""
    accepted = sorted((o for o in outcomes if o.accepted), key=lambda o: o.index)[:count]
    write_parquet(out / PARQUET, rows(accepted, device, version))
    return write_report(out, outcomes, accepted, f"cudagym synth: {out.name}")


def _histograms(out: Path, accepted: Sequence[Outcome]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed: no histograms (pip install 'cudagym[synth]')")
        return
    per_ops = collections.Counter(len(o.ops) for o in accepted)
    frequency = collections.Counter(op.rsplit(".", 1)[-1] for o in accepted for op in o.ops).most_common(TOP_OPS)
    eager = [o.verdict.eager_ms for o in accepted if o.verdict.eager_ms is not None]
    plots = [
        (
            "ops_per_task.png",
            "ops per task",
            lambda ax: ax.bar([str(k) for k in sorted(per_ops)], [per_ops[k] for k in sorted(per_ops)]),
        ),
        (
            "op_frequency.png",
            f"op frequency (top {TOP_OPS})",
            lambda ax: ax.barh([n for n, _ in frequency][::-1], [c for _, c in frequency][::-1]),
        ),
        ("eager_ms.png", "eager time (ms)", lambda ax: ax.hist(eager, bins=20)),
    ]
    for name, title, draw in plots:
        fig, ax = plt.subplots(figsize=(7, 6 if name == "op_frequency.png" else 4))
        draw(ax)
        ax.set_title(title)
        ax.set_ylabel("tasks" if name != "op_frequency.png" else "")
        fig.tight_layout()
        fig.savefig(out / name, dpi=90)
        plt.close(fig)
