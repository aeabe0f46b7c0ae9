"""The built-in task set: our own tasks, each with reference solutions, under ``tasks/builtin/``.

Each task is a folder ``builtin/<key>/`` holding ``model.py`` (KernelBench format), ``task.toml``
(metadata, size profiles, expected tiers) and ``solutions/<backend>/`` in workspace layout.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from cudagym.tasks.task import DEFAULT_TOLERANCE, Task, TaskMetadata

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"


def load_task_dir(folder: Path, *, prefix: str = "builtin") -> Task:
    """Reads one task folder (``model.py`` + ``task.toml`` + optional ``solutions/``)."""
    meta = tomllib.loads((folder / "task.toml").read_text())
    solutions = {}
    solution_root = folder / "solutions"
    if solution_root.is_dir():
        solutions = {p.name: p for p in sorted(solution_root.iterdir()) if p.is_dir()}
    metadata = TaskMetadata(
        level=meta.get("level"),
        ops=tuple(meta.get("ops", ())),
        source=prefix,
        atol=float(meta.get("atol", DEFAULT_TOLERANCE)),
        rtol=float(meta.get("rtol", DEFAULT_TOLERANCE)),
        dtype=meta.get("dtype", "float32"),
        sizes=meta.get("sizes", {}),
        input_kinds=tuple(meta.get("input_kinds", ("task",))),
        extra={"category": meta.get("category", ""), "description": meta.get("description", "")},
    )
    return Task(
        id=f"{prefix}/{folder.name}",
        name=meta.get("name", folder.name),
        source=(folder / "model.py").read_text(),
        metadata=metadata,
        solutions=solutions,
        expected_tiers={k: int(v) for k, v in meta.get("expected_tier", {}).items()},
    )


def load_builtin(path: str | Path | None = None) -> list[Task]:
    """All built-in tasks, sorted by folder name (so ids and order are stable)."""
    root = Path(path) if path is not None else BUILTIN_DIR
    folders = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    return [load_task_dir(p) for p in folders]
