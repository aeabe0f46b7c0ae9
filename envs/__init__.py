"""Environments: ``CudaKernelEnv`` (Gymnasium), ``CudaKernelGroupEnv`` (PettingZoo), ``CudaKernelTAEnv`` (TextArena).

The PettingZoo and TextArena environments need their optional extras (``pip install 'cudagym[pettingzoo]'``,
``'cudagym[textarena]'``); they are imported on first use, so ``import cudagym.envs`` needs neither.
"""

from __future__ import annotations

import importlib
from typing import Any

from cudagym.envs.kernel_env import CudaKernelEnv

_LAZY = {
    "CudaKernelGroupEnv": "cudagym.envs.pettingzoo_env",
    "CudaKernelTAEnv": "cudagym.envs.textarena_env",
    "register_textarena": "cudagym.envs.textarena_env",
}

__all__ = ["CudaKernelEnv"]  # the lazy names stay out, so that `from cudagym.envs import *` needs no extra


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
