"""Task sets as the rows LLM trainers read: ``to_rows`` (plain dicts) and ``to_hf_dataset`` (a ``datasets.Dataset``).

One row per task, with the columns TRL's ``GRPOTrainer``, verifiers and SkyRL take a prompt dataset in:

* ``prompt``: the conversation an episode starts with, in chat form: a ``system`` message (the task's instructions,
  as ``ChatMessages`` and the environment give them) and a ``user`` message (``## model.py`` and the reference);
* ``task_id``: the task's id, to pass to ``env.reset(options={"task_id": ...})`` so that the episode plays the task
  the prompt shows;
* ``info``: plain data about the task (``task_set``, ``name``, ``level``, ``ops``, ``source``, ``precision``,
  ``backend``), the same keys in every row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cudagym.tasks.registry import load
from cudagym.tasks.task import Task, TaskSet


def _task_set(tasks: str | TaskSet | Iterable[Task], options: dict[str, Any]) -> TaskSet:
    if isinstance(tasks, str):
        return load(tasks, **options)
    if options:
        raise TypeError(f"options ({', '.join(sorted(options))}) go with a task set's name, not with its tasks")
    return tasks if isinstance(tasks, TaskSet) else TaskSet("custom", list(tasks))


def to_rows(
    tasks: str | TaskSet | Iterable[Task] = "builtin",
    *,
    backend: str = "auto",
    max_turns: int = 200,
    **options: Any,
) -> list[dict[str, Any]]:
    """One row per task (see the module doc).

    Args:
        tasks: a task set's name (loaded with ``options``, as ``cudagym.tasks.load`` takes them), a ``TaskSet`` or
            any tasks.
        backend: "auto", "cpu" or "cuda": the backend whose instructions and reference sizes the prompt shows (the
            environment the rows are played in should use the same one).
        max_turns: the turn budget the instructions state (the environment's ``max_turns``).
        **options: loader options and filters for a named set (``level=``, ``ids=``, ``sizes=``, ...).
    """
    from cudagym.backends import resolve_backend
    from cudagym.instructions import render_instructions

    task_set = _task_set(tasks, options)
    resolved = resolve_backend(backend)
    rows = []
    for task in task_set:
        system = render_instructions(task, resolved, max_turns=max_turns)
        user = f"## model.py\n{task.source_for(resolved.name)}"
        info = {
            "task_set": task_set.name,
            "name": task.name,
            "level": task.metadata.level,
            "ops": list(task.metadata.ops),
            "source": task.metadata.source,
            "precision": task.metadata.precision,
            "backend": resolved.name,
        }
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        rows.append({"prompt": prompt, "task_id": task.id, "info": info})
    return rows


def to_hf_dataset(
    tasks: str | TaskSet | Iterable[Task] = "builtin",
    *,
    backend: str = "auto",
    max_turns: int = 200,
    **options: Any,
) -> Any:
    """The rows of :func:`to_rows` as a ``datasets.Dataset`` (columns ``prompt``, ``task_id``, ``info``), ready for
    ``GRPOTrainer(train_dataset=...)`` and the like. Needs the ``datasets`` package.

    Raises:
        ImportError: ``datasets`` is not installed (the message says how to get it).
    """
    try:
        from datasets import Dataset
    except ImportError as exc:
        raise ImportError("to_hf_dataset needs `datasets`: `pip install datasets` (or use to_rows)") from exc
    return Dataset.from_list(to_rows(tasks, backend=backend, max_turns=max_turns, **options))
