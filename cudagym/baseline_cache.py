"""The cache of eager and torch.compile baselines: one JSON file per (task, backend, device, torch version,
threads, timing settings) under ``<cache_dir>/baselines/``.

A baseline is what a candidate's time is compared with, so it must be measured under exactly the conditions the
key names: a task whose reference changed, another GPU model, another torch or other timing settings get a file
of their own. Files are written whole (a temporary file renamed over the old), so concurrent environments never
read half a file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from cudagym.backends import Backend
from cudagym.harness.timing import METHOD_REVISION, TimingConfig
from cudagym.tasks.task import Task


@dataclasses.dataclass(frozen=True)
class BaselineCache:
    """Where the baselines of one backend, torch version and timing configuration live."""

    cache_dir: Path
    backend: Backend
    torch_version: str
    timing: TimingConfig

    def key(self, task: Task) -> str:
        """The identity of ``task``'s baselines under this configuration (24 hex digits)."""
        blob = json.dumps(
            [
                task.fingerprint(self.backend.name),
                self.backend.name,
                self.backend.device_name,
                self.torch_version,
                self.backend.threads,
                dataclasses.asdict(self.timing),
                METHOD_REVISION,
            ],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def path(self, task: Task) -> Path:
        return self.cache_dir / "baselines" / f"{self.key(task)}.json"

    def read(self, task: Task, *, need_compile: bool) -> dict[str, Any] | None:
        """The cached baselines of ``task`` when they hold every one needed (torch.compile's only when
        ``need_compile``), else None."""
        try:
            data = json.loads(self.path(task).read_text())
        except (OSError, ValueError):
            return None
        complete = "eager_ms" in data and (data.get("compile_ms") is not None or not need_compile)
        return data if complete else None

    def write(self, task: Task, eager_ms: float, compile_ms: float | None, *, eager_spread: float = 0.0) -> None:
        """Records ``task``'s baselines (``eager_spread``: the eager repetitions' interquartile range over their
        median, the noise a later re-validation is judged against)."""
        path = self.path(task)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        record = {
            "task": task.id,
            "device": self.backend.device_name,
            "eager_ms": eager_ms,
            "compile_ms": compile_ms,
            "eager_spread": eager_spread,
            "torch": self.torch_version,
        }
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
