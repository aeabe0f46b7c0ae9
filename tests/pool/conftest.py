"""One machine pool of real evaluators for the package's tests, on a small ReLU (the built-in one at 64 K elements).

The pool is shared by the tests (its evaluators' reference processes start once) and records every evaluator it
makes (``MachinePool.made``), so that a test can tell whether sessions shared one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from cudagym_testing import RELU, relu_solution

from cudagym.backends import resolve_backend
from cudagym.eval_config import EvalConfig
from cudagym.evaluator import Evaluator, LocalEvaluator
from cudagym.pool import EvaluationPool, PoolLimits
from cudagym.tasks import Task, load
from cudagym.workspace import Workspace

CPU = resolve_backend("cpu")
SIZES = {"N": 65536}
"""The built-in ReLU's size in these tests: a check takes milliseconds, not a second."""


@dataclasses.dataclass
class MachinePool:
    """The package's pool and the evaluators it made, in order."""

    pool: EvaluationPool
    made: list[Evaluator]


@pytest.fixture(scope="package")
def small_relu() -> Task:
    return load("builtin", sizes=SIZES).get(RELU)


@pytest.fixture(scope="package")
def pool_config(fast_config: EvalConfig) -> EvalConfig:
    """The fast config without the torch.compile baseline (its compile time is not what is tested here)."""
    return dataclasses.replace(fast_config, compile_baseline=False)


@pytest.fixture(scope="package")
def machine(cache_dir: Path) -> Iterator[MachinePool]:
    made: list[Evaluator] = []

    def make(task: Task, config: EvalConfig) -> Evaluator:
        made.append(LocalEvaluator(task, CPU, config, cache_dir=cache_dir))
        return made[-1]

    limits = PoolLimits(max_evaluators=3, max_per_task=2, compile_workers=2)
    pool = EvaluationPool(CPU, cache_dir=cache_dir, limits=limits, make_evaluator=make)
    yield MachinePool(pool, made)
    pool.close()


def solution_workspace(task: Task, *, wrong: bool = False) -> Workspace:
    """A workspace of ``task`` (the ReLU) with its solution written; ``wrong``: negatives pass through."""
    workspace = Workspace(task.source_for("cpu"), "instructions")
    for path, content in relu_solution().items():
        if wrong and path == "kernels/relu.cpp":
            content = content.replace("y[i] = v > 0.0f ? v : 0.0f;", "y[i] = v;")
            assert "y[i] = v;" in content
        workspace.write(path, content)
    return workspace
