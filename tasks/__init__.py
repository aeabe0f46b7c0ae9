"""Tasks and task sets: ``load(name, **options)``, ``register_task_set(name, loader)``; ``to_rows`` and
``to_hf_dataset`` for trainers' prompt datasets."""

from cudagym.tasks.hub import HubUnreachable
from cudagym.tasks.input_verdict import InputVerdict
from cudagym.tasks.registry import (
    ENTRY_POINT_GROUP,
    TaskSetNotFound,
    filter_tasks,
    load,
    register_task_set,
    registered_names,
)
from cudagym.tasks.requirements import missing_requirements, requirement_notes
from cudagym.tasks.task import Task, TaskMetadata, TaskSet, rewrite_constants
from cudagym.tasks.trainer_rows import to_hf_dataset, to_rows

__all__ = [
    "ENTRY_POINT_GROUP",
    "HubUnreachable",
    "InputVerdict",
    "Task",
    "TaskMetadata",
    "TaskSet",
    "TaskSetNotFound",
    "filter_tasks",
    "load",
    "missing_requirements",
    "register_task_set",
    "registered_names",
    "requirement_notes",
    "rewrite_constants",
    "to_hf_dataset",
    "to_rows",
]
