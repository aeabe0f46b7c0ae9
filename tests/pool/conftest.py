"""One machine pool of real evaluators for the package's tests, on a small ReLU (the built-in one at 64 K elements).

The pool is shared by the tests (its evaluators' reference processes start once) and records every evaluator it
makes (``MachinePool.made``), so that a test can tell whether sessions shared one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from cudagym_testing import RELU
from pool_testing import CPU, SIZES, MachinePool

from cudagym.eval_config import EvalConfig
from cudagym.evaluator import Evaluator, LocalEvaluator
from cudagym.pool import EvaluationPool, PoolLimits
from cudagym.tasks import Task, load


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
