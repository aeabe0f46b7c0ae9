"""Tasks and task sets: ``load(name, **options)``, ``register_task_set(name, loader)``."""

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

__all__ = [
    "ENTRY_POINT_GROUP",
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
]
