"""Env fixtures: a CPU env on the built-in set with the fast evaluation config."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig


@pytest.fixture
def env(fast_config: EvalConfig) -> Iterator[CudaKernelEnv]:
    environment = CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=50)
    yield environment
    environment.close()
