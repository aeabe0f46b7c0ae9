"""cudagym: GPU-kernel optimisation as a Gymnasium environment.

``import cudagym`` registers ``CudaKernel-v0``; ``gym.make("cudagym:CudaKernel-v0")`` works without the
import (the form spawned vector-env workers need: Gymnasium 1.x has no plugin entry points).

The library reports through ``logging``: each module logs to ``logging.getLogger(__name__)`` under the ``cudagym``
logger, which has a ``NullHandler`` and nothing else, so it prints nothing until the application configures logging
(``logging.basicConfig(level=logging.INFO)``, or ``cudagym --log-level info`` on the command line). Levels: DEBUG for
routine steps, INFO for the outcome of a stage or a load, WARNING where something fell back to a weaker path (a
failed fork server, no sandbox, a harness failure).
"""

from __future__ import annotations

import logging

import gymnasium as gym

logging.getLogger(__name__).addHandler(logging.NullHandler())

__version__ = "0.1.0"

ENV_ID = "CudaKernel-v0"


def register_envs() -> None:
    """Registers cudagym's environments with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(
            id=ENV_ID,
            entry_point="cudagym.envs.kernel_env:CudaKernelEnv",
            nondeterministic=True,  # compilers, timings and secret seeds: equal seeds need not give equal info
        )


register_envs()

__all__ = ["ENV_ID", "__version__", "register_envs"]
