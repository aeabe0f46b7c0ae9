"""What the attack modules share."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.integrity.policy import IntegrityPolicy


@pytest.fixture(scope="module")
def env(fast_config: EvalConfig) -> Iterator[CudaKernelEnv]:
    """A cpu env with every static check off, so that only the run-time defences stand in an attack's way (a module
    that needs another env defines its own ``env``)."""
    config = dataclasses.replace(fast_config, policy=IntegrityPolicy.without_static_checks())
    environment = CudaKernelEnv(backend="cpu", eval_config=config)
    yield environment
    environment.close()
