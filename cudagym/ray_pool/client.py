"""The environment's side of the Ray pool: an ``Evaluator`` whose stages run on the cluster.

``gym.make("CudaKernel-v0", evaluator="ray", ray_address=...)`` gives the env a :class:`RayEvaluatorFactory`; its
evaluators send each compile, verify, profile and submit as a :class:`~cudagym.ray_pool.jobs.Job` (the workspace
frozen into a snapshot, which travels through Ray's object store) to the process's :class:`RayPool` and wait for the
result. The env's API does not change: results are the same dataclasses a local evaluator returns, and a pool
failure is a ``harness_error`` result. One pool serves every env of a process (its workers are shared and its
queue takes the envs in turn); it is started by the first evaluator and stopped when the process exits. A factory
that names a cluster pool (``cluster_pool="..."``) sends the jobs to the pool of that name that the whole cluster
shares instead (``cudagym.ray_pool.cluster_pool``): envs in many processes, one set of workers.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import threading
import uuid

from cudagym.backends import Backend
from cudagym.eval_config import EvalConfig
from cudagym.pool.jobs import JobEvaluator
from cudagym.ray_pool.cluster_pool import ClusterPool
from cudagym.ray_pool.jobs import Job, JobStage
from cudagym.ray_pool.pool import RayPool
from cudagym.ray_pool.workers import WorkerSpec
from cudagym.results import StageResult
from cudagym.tasks.task import Task
from cudagym.workspace import Workspace

logger = logging.getLogger(__name__)
MISSING_RAY = "the Ray evaluation pool needs Ray: pip install 'cudagym[ray]'"


def require_ray() -> None:
    """Raises ImportError saying how to install Ray where it is not installed."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise ImportError(MISSING_RAY) from exc


class RayEvaluator(JobEvaluator):
    """Evaluates one environment's workspaces on the pool (the ``Evaluator`` protocol of ``cudagym.evaluator``)."""

    def __init__(
        self, pool: RayPool | ClusterPool, task: Task, backend: Backend, config: EvalConfig, *, client: str = ""
    ) -> None:
        self.pool = pool
        self.task = task
        self.backend = backend
        self.config = config
        self.client = client or f"env-{uuid.uuid4().hex[:8]}"

    def _run(self, stage: JobStage, workspace: Workspace, *, ncu: bool = False) -> StageResult:
        snapshot = workspace.freeze()
        job = Job(stage, self.task, self.backend.name, self.config, snapshot, client=self.client, ncu=ncu)
        result = self.pool.run(job)
        if snapshot.changed_fixed:
            workspace.restore_fixed()  # the worker restored its copy's fixed files, as a local evaluator would
        return result

    def retarget(self, task: Task) -> None:
        """The next jobs name ``task`` (workers keep their evaluators warm by task)."""
        self.task = task

    def close(self) -> None:
        """Nothing to stop: the evaluators are the workers', shared with other environments."""
        return None


@dataclasses.dataclass(frozen=True)
class RayEvaluatorFactory:
    """Builds :class:`RayEvaluator` instances on the process's pool, or on a pool the cluster shares (picklable:
    vector-env workers use it too).

    Args:
        address: the Ray cluster (``ray.init(address=...)``; None: the one this process joined, else a local one).
        workers: the pool's workers; default: for the env's backend, cuda workers for every GPU of the cluster, a cpu
            worker for each of its CPUs.
        cache_dir: the compile and baseline cache on the workers' nodes (default ``~/.cache/cudagym`` there).
        placement_timeout_s: see :class:`RayPool`.
        cluster_pool: the name of a pool the whole cluster shares (``cudagym.ray_pool.cluster_pool``): every process
            whose factory names it sends its jobs there, and the first one starts it with its ``workers``. None: a
            pool of this process's own.
    """

    address: str | None = None
    workers: tuple[WorkerSpec, ...] | None = None
    cache_dir: str | None = None
    placement_timeout_s: float = 300.0
    cluster_pool: str | None = None

    def __post_init__(self) -> None:
        require_ray()
        if self.cluster_pool is not None and not self.cluster_pool:
            raise ValueError("cluster_pool names a pool: give a non-empty name, or None for a pool of this process")

    def __call__(self, task: Task, backend: Backend, config: EvalConfig) -> RayEvaluator:
        return RayEvaluator(shared_pool(self, backend.name), task, backend, config)

    def specs(self, backend: str) -> tuple[WorkerSpec, ...]:
        """The workers to start for an env of ``backend``."""
        if self.workers is not None:
            return self.workers
        import ray

        resources = ray.cluster_resources()
        if backend == "cuda":
            return (WorkerSpec("cuda", count=max(1, int(resources.get("GPU", 0))), cache_dir=self.cache_dir),)
        cpus = int(resources.get("CPU", 1))
        return (WorkerSpec("cpu", count=max(1, cpus), num_cpus=1, cache_dir=self.cache_dir),)


_POOLS: dict[tuple[RayEvaluatorFactory, str], RayPool | ClusterPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(factory: RayEvaluatorFactory, backend: str) -> RayPool | ClusterPool:
    """The process's pool for ``factory``'s settings and ``backend`` (started on first use), or its handle on the
    cluster pool that ``factory`` names."""
    with _POOLS_LOCK:
        pool = _POOLS.get((factory, backend))
        if pool is None:
            import ray

            if not ray.is_initialized():
                ray.init(address=factory.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
            if factory.cluster_pool is not None:
                pool = ClusterPool(
                    factory.cluster_pool,
                    backend,
                    factory.specs(backend),
                    placement_timeout_s=factory.placement_timeout_s,
                )
                logger.info("%s envs evaluate on the cluster pool %r", backend, factory.cluster_pool)
            else:
                pool = RayPool(factory.specs(backend), placement_timeout_s=factory.placement_timeout_s)
                logger.info("started a Ray evaluation pool for %s envs", backend)
            _POOLS[(factory, backend)] = pool
        return pool


def shutdown_pools() -> None:
    """Stops every pool this process started (at exit; tests call it between clusters). A cluster pool is the
    cluster's, not the process's: its handle is dropped and the pool goes on serving the other processes."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        if isinstance(pool, RayPool):
            pool.shutdown()


atexit.register(shutdown_pools)
