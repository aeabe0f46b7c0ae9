"""What an environment says at ``reset`` about a task beyond its instructions: what is known of its inputs (the input
probe's stored verdict, ``cudagym.input_probe``) and whether its tensors fit the backend's memory
(``cudagym.footprint``). Both are read from the cache or estimated cheaply; neither raises.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

from cudagym.backends import Backend
from cudagym.eval_config import EvalConfig
from cudagym.footprint import MemoryCheck, check_memory
from cudagym.input_probe import known_verdict
from cudagym.tasks.degeneracy import VerdictStore
from cudagym.tasks.input_verdict import KIND_NAMES, InputVerdict
from cudagym.tasks.task import Task

logger = logging.getLogger(__name__)

_WARNED: set[tuple[str, str]] = set()  # (task id, backend) whose memory warning this process logged
_WARNED_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class TaskNotes:
    """The notes of one reset.

    Attributes:
        task_id: the task.
        backend: the backend's name.
        verdict: the stored input verdict, None before the task's first verify (or ``cudagym tasks check``).
        memory: the task's estimated needs against the backend's memory, None where either cannot be told.
    """

    task_id: str
    backend: str
    verdict: InputVerdict | None = None
    memory: MemoryCheck | None = None

    @property
    def memory_warning(self) -> str | None:
        """Why the task may not fit, or None."""
        if self.memory is None or self.memory.fits:
            return None
        return self.memory.warning(self.task_id, self.backend)

    @property
    def lines(self) -> tuple[str, ...]:
        """Lines for the top of the first observation."""
        lines = []
        if self.verdict is not None and self.verdict.degenerate:
            lines.append(
                f"this task is degenerate ({self.verdict.describe()}): correctness is all its checks can prove, "
                f"so a submit earns at most tier {self.verdict.max_tier}."
            )
        elif self.verdict is not None and self.verdict.added:
            drawn = " and ".join(KIND_NAMES.get(kind, kind) for kind in self.verdict.added)
            lines.append(
                f"verification also draws {drawn}, not only get_inputs()'s distribution (on that alone a shortcut "
                "would pass): your kernels must compute Model for any input values."
            )
        if self.memory_warning:
            lines.append(self.memory_warning)
        return tuple(lines)

    def info(self) -> dict[str, Any]:
        """``info`` entries: ``input_kinds`` and ``degenerate`` (None while unknown), ``memory_warning``."""
        return {
            "input_kinds": list(self.verdict.kinds) if self.verdict is not None else None,
            "degenerate": self.verdict.degenerate if self.verdict is not None else None,
            "memory_warning": self.memory_warning,
        }


def task_notes(task: Task, backend: Backend, config: EvalConfig, store: VerdictStore, cache_dir: Path) -> TaskNotes:
    """The notes for ``task`` on ``backend``; a memory warning is also logged (once per task and process)."""
    try:
        memory = check_memory(task, backend, cache_dir)
    except Exception as exc:  # an estimate that fails must not stop a reset
        logger.debug("no memory check for %s: %s: %s", task.id, type(exc).__name__, exc)
        memory = None
    notes = TaskNotes(task.id, backend.name, known_verdict(store, task, backend.name, config), memory)
    warning = notes.memory_warning
    if warning:
        with _WARNED_LOCK:
            first = (task.id, backend.name) not in _WARNED
            _WARNED.add((task.id, backend.name))
        if first:
            logger.warning("%s", warning)
    return notes
