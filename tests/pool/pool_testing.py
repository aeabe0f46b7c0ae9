"""What the pool's tests share besides fixtures: the backend, the ReLU's size, the pool record and solution workspaces
(a module of its own, so that tests import it by a name no other folder's conftest shares)."""

from __future__ import annotations

import dataclasses

from cudagym_testing import relu_solution

from cudagym.backends import resolve_backend
from cudagym.evaluator import Evaluator
from cudagym.pool import EvaluationPool
from cudagym.tasks import Task
from cudagym.workspace import Workspace

CPU = resolve_backend("cpu")
SIZES = {"N": 65536}
"""The built-in ReLU's size in these tests: a check takes milliseconds, not a second."""


@dataclasses.dataclass
class MachinePool:
    """The package's pool and the evaluators it made, in order."""

    pool: EvaluationPool
    made: list[Evaluator]


def solution_workspace(task: Task, *, wrong: bool = False) -> Workspace:
    """A workspace of ``task`` (the ReLU) with its solution written; ``wrong``: negatives pass through."""
    workspace = Workspace(task.source_for("cpu"), "instructions")
    for path, content in relu_solution().items():
        if wrong and path == "kernels/relu.cpp":
            content = content.replace("y[i] = v > 0.0f ? v : 0.0f;", "y[i] = v;")
            assert "y[i] = v;" in content
        workspace.write(path, content)
    return workspace
