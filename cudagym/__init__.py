"""cudagym: GPU-kernel optimisation as a Gymnasium environment.

``import cudagym`` registers ``CudaKernel-v0``; ``gym.make("cudagym:CudaKernel-v0")`` works without the
import (the form spawned vector-env workers need: Gymnasium 1.x has no plugin entry points).
"""

from __future__ import annotations

import gymnasium as gym

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
