"""What a run leaves behind: the learning curve (CSV, JSON, PNG; TensorBoard where installed), the rollouts as
chat JSONL (the format ``cudagym rft-export`` writes, so value pretraining and RFT can read them back), and the
summary."""

from __future__ import annotations

import csv
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cudagym.baselines.llm_ppo.render import TokenTrajectory

logger = logging.getLogger(__name__)

CURVE_COLUMNS = ("stage", "step", "mean_reward", "policy_loss", "value_loss", "kl", "clip_fraction", "sft_loss")


DRAW_EVERY_S = 10.0


class RunLog:
    """The learning curve of a run: one row per optimisation step of any stage, written as it grows (the tables at
    every row, the plot at most every ``DRAW_EVERY_S``), so that a run cut short keeps its curve."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []
        self._writer: Any = None
        self._drawn = time.monotonic()
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.out / "tensorboard"))
        except ImportError:
            logger.info("tensorboard is not installed: no TensorBoard logs")

    def record(self, stage: str, metrics: dict[str, float]) -> None:
        """Adds a row (``metrics`` must hold ``step``), rewrites the CSV and JSON (a run cut short keeps its rows) and
        the plot when it is ``DRAW_EVERY_S`` old, and sends its numbers to TensorBoard."""
        row = {"stage": stage, **metrics}
        self.rows.append(row)
        self._write_tables()
        if time.monotonic() - self._drawn >= DRAW_EVERY_S:
            self._plot()
        if self._writer is not None:
            index = len(self.rows)
            for key, value in metrics.items():
                if key != "step" and isinstance(value, (int, float)):
                    self._writer.add_scalar(f"{stage}/{key}", value, index)

    def write(self) -> dict[str, Path]:
        """Writes ``curve.csv``, ``curve.json`` and (with matplotlib) ``curve.png``; returns their paths."""
        files = self._write_tables()
        if self._writer is not None:
            self._writer.flush()
            files["tensorboard"] = self.out / "tensorboard"
        png = self._plot()
        if png is not None:
            files["curve_png"] = png
        return files

    def _write_tables(self) -> dict[str, Path]:
        files = {"curve_csv": self.out / "curve.csv", "curve_json": self.out / "curve.json"}
        with files["curve_csv"].open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CURVE_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            for row in self.rows:
                writer.writerow({key: row.get(key, "") for key in CURVE_COLUMNS})
        files["curve_json"].write_text(json.dumps(self.rows, indent=1) + "\n")
        return files

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    def _plot(self) -> Path | None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        self._drawn = time.monotonic()
        panels = [("mean_reward", "mean episode reward"), ("value_loss", "value loss"), ("sft_loss", "RFT loss")]
        fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.8))
        for ax, (key, label) in zip(axes, panels, strict=True):
            for stage in dict.fromkeys(row["stage"] for row in self.rows):
                points = [(i, r[key]) for i, r in enumerate(self.rows) if r["stage"] == stage and key in r]
                if points:
                    ax.plot(*zip(*points, strict=True), "o-", ms=3, label=stage)
            ax.set_xlabel("optimisation step (all stages)")
            ax.set_title(label)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        fig.tight_layout()
        path = self.out / "curve.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def write_rollouts(path: str | Path, trajectories: Sequence[TokenTrajectory], tools: list[dict[str, Any]]) -> Path:
    """Appends the episodes as chat JSONL lines (``messages``, ``tools``, ``metadata`` with ``reward``)."""
    path = Path(path)
    with path.open("a") as f:
        for trajectory in trajectories:
            metadata = {
                "task_id": trajectory.task_id,
                "reward": trajectory.episode_return,
                "turns": len(trajectory.turn_ends),
                "terminated": trajectory.terminated,
            }
            f.write(json.dumps({"messages": trajectory.messages, "tools": tools, "metadata": metadata}) + "\n")
    return path


def read_chat_lines(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The lines of chat JSONL files (``cudagym rft-export`` or :func:`write_rollouts`); each needs ``messages`` and
    ``metadata.reward``."""
    lines = []
    for path in paths:
        for number, text in enumerate(Path(path).read_text().splitlines(), 1):
            if not text.strip():
                continue
            line = json.loads(text)
            if not isinstance(line.get("messages"), list) or "reward" not in (line.get("metadata") or {}):
                raise ValueError(f"{path}:{number}: a chat line needs 'messages' and 'metadata.reward'")
            lines.append(line)
    if not lines:
        raise ValueError(f"no conversations in {', '.join(map(str, paths))}")
    return lines
