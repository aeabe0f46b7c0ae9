"""Environments: ``CudaKernelEnv`` (Gymnasium)."""

from cudagym.envs.kernel_env import CudaKernelEnv

__all__ = ["CudaKernelEnv"]
