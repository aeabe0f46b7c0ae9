"""The evaluation pool on a Ray cluster (``pip install 'cudagym[ray]'``).

Environments anywhere in the cluster evaluate through it with ``gym.make("CudaKernel-v0", evaluator="ray",
ray_address=...)``; a trainer submits a batch of evaluations with :meth:`RayPool.submit_many`. The modules: ``jobs``
(the messages), ``worker`` (the actor that evaluates), ``workers`` (their placement and replacement), ``watcher``
(lost workers and nodes), ``pool`` (the queue and dispatcher), ``cluster_pool`` (one pool the whole cluster shares,
held by a named actor), ``client`` (the env's evaluator and its factory).
Ray is imported where it is used: the package imports without it, and its factory says how to install it.
"""

from __future__ import annotations

from cudagym.ray_pool.client import MISSING_RAY, RayEvaluator, RayEvaluatorFactory, require_ray, shutdown_pools
from cudagym.ray_pool.cluster_pool import ClusterPool, stop_cluster_pool
from cudagym.ray_pool.jobs import Job, JobStage
from cudagym.ray_pool.pool import PoolStats, RayPool
from cudagym.ray_pool.workers import WorkerSpec

__all__ = [
    "MISSING_RAY",
    "ClusterPool",
    "Job",
    "JobStage",
    "PoolStats",
    "RayEvaluator",
    "RayEvaluatorFactory",
    "RayPool",
    "WorkerSpec",
    "require_ray",
    "shutdown_pools",
    "stop_cluster_pool",
]
