"""The built-in task set: our own tasks, each with reference solutions, under ``tasks/builtin/``.

Each task is a folder ``builtin/<key>/`` holding ``model.py`` (KernelBench format), ``task.toml``
(metadata, size profiles, expected tiers, and an ``[integrity_policy]`` table of policy hints such as
``allow_tf32 = true`` for the GEMMs whose CUDA solutions use TF32 tensor cores) and ``solutions/<backend>/`` in
workspace layout.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from cudagym.tasks.task import DEFAULT_TOLERANCE, Task, TaskMetadata, for_precision

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
        extra=_extra(meta),
    )
    return Task(
        id=f"{prefix}/{folder.name}",
        name=meta.get("name", folder.name),
        source=(folder / "model.py").read_text(),
        metadata=metadata,
        solutions=solutions,
        expected_tiers={k: int(v) for k, v in meta.get("expected_tier", {}).items()},
    )


def _extra(meta: dict) -> dict:
    """``TaskMetadata.extra`` of a task.toml: category, description and, where given, the policy hints."""
    extra = {"category": meta.get("category", ""), "description": meta.get("description", "")}
    if "integrity_policy" in meta:
        extra["integrity_policy"] = dict(meta["integrity_policy"])
    return extra


def load_builtin(path: str | Path | None = None, *, precision: str = "fp32") -> list[Task]:
    """All built-in tasks, sorted by folder name (so ids and order are stable), on the ``precision`` track
    ("fp32", "bf16" or "fp16"; see ``cudagym.tasks.task.for_precision``)."""
    root = Path(path) if path is not None else BUILTIN_DIR
    folders = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    return [for_precision(load_task_dir(p), precision) for p in folders]
