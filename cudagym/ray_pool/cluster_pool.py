"""One evaluation pool for a whole Ray cluster, shared by every process that makes environments or submits jobs.

A :class:`~cudagym.ray_pool.pool.RayPool` lives in the process that started it, so trainers whose environments run in
several processes (rollout workers, vector envs in subprocesses, Ray actors of a trainer) would each start a pool with
workers of their own, competing for the cluster's GPUs. A *cluster pool* is one ``RayPool`` held by a named, detached
Ray actor (``PoolService``, in Ray's namespace ``cudagym``, taking no CPU): the first process that asks for it by name
starts it, every later one (on any node) finds it, and all their jobs share its workers and its fair queue (clients
are the environments, so a trainer's batch does not hold back another process's single verify).

:class:`ClusterPool` is the handle one process keeps. It offers the ``RayPool`` calls the environments and trainers
use (``submit``, ``submit_many``, ``run``, ``stats``), and, as the pool does, answers every failure with a
``harness_error`` result, never an exception: a service that died (its node lost, killed) answers the jobs it held
that way, and the next job starts a new service. The service outlives the processes that use it; stop it with
:meth:`ClusterPool.shutdown` (or :func:`stop_cluster_pool`), or it ends with the cluster.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from cudagym.ray_pool.jobs import Job, harness_error
from cudagym.ray_pool.pool import PoolStats, RayPool
from cudagym.ray_pool.workers import WorkerSpec
from cudagym.results import StageResult

logger = logging.getLogger(__name__)
NAMESPACE = "cudagym"
# jobs the service holds at once (an async actor's concurrent calls): every env of the cluster plus trainers' batches
MAX_JOBS = 4096
CALL_TIMEOUT_S = 60.0  # the service's answer to stats and shutdown


def service_name(name: str, backend: str) -> str:
    """The Ray actor name of the cluster pool ``name`` for ``backend``'s jobs."""
    return f"cudagym-pool-{name}-{backend}"


@functools.cache
def _service_class() -> Any:
    """The ``PoolService`` actor class (made on first use: the package imports without Ray)."""
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class PoolService:
        """A ``RayPool`` in an actor of its own, which every process of the cluster reaches by its name."""

        def __init__(self, specs: Sequence[WorkerSpec], placement_timeout_s: float) -> None:
            self.pool = RayPool(specs, placement_timeout_s=placement_timeout_s)

        async def run(self, job: Job) -> StageResult:
            return await asyncio.wrap_future(self.pool.submit(job))

        async def stats(self) -> PoolStats:
            return self.pool.stats()

        async def shutdown(self) -> None:
            await asyncio.get_running_loop().run_in_executor(None, self.pool.shutdown)

    return PoolService


class ClusterPool:
    """This process's handle on the cluster pool ``name`` for ``backend``'s jobs (see the module doc).

    Args:
        name: the pool's name: processes that name the same pool share it.
        backend: "cpu" or "cuda": the jobs it takes.
        workers: the workers the service starts when this handle is the first to ask for it (a service found
            running keeps the workers it was started with).
        placement_timeout_s: see :class:`RayPool`.
    """

    def __init__(
        self, name: str, backend: str, workers: Sequence[WorkerSpec], *, placement_timeout_s: float = 300.0
    ) -> None:
        if not name:
            raise ValueError("a cluster pool needs a name")
        self.name = name
        self.backend = backend
        self.workers = tuple(workers)
        if sum(spec.count for spec in self.workers) == 0:  # said here: the service's own error would reach no caller
            raise ValueError("the pool needs at least one worker")
        self.placement_timeout_s = placement_timeout_s
        self._lock = threading.Lock()
        self._service: Any = None

    def _handle(self) -> Any:
        """The service's actor handle: found by its name, or started now."""
        with self._lock:
            if self._service is None:
                self._service = (
                    _service_class()
                    .options(
                        name=service_name(self.name, self.backend),
                        namespace=NAMESPACE,
                        lifetime="detached",
                        get_if_exists=True,
                        max_concurrency=MAX_JOBS,
                    )
                    .remote(self.workers, self.placement_timeout_s)
                )
            return self._service

    def _lost(self, service: Any) -> None:
        """Forgets ``service`` after it failed, so that the next job finds or starts a live one."""
        with self._lock:
            if self._service is service:
                self._service = None

    def submit(self, job: Job) -> Future[StageResult]:
        """Queues ``job`` on the cluster pool; the future's result is its stage result (a harness error where the
        pool or its service failed)."""
        answer: Future[StageResult] = Future()
        try:
            service = self._handle()
            pending = service.run.remote(job).future()
        except Exception as exc:  # Ray refused the call: no service could be reached or started
            logger.warning("cluster pool %s: %s could not be sent: %r", self.name, job.describe(), exc)
            answer.set_result(harness_error(job, f"the cluster's evaluation pool could not be reached: {exc}"))
            return answer

        def settle(done: Future[Any]) -> None:
            error = done.exception()
            if error is None:
                answer.set_result(done.result())
                return
            self._lost(service)
            logger.warning("cluster pool %s: %s lost with the service: %r", self.name, job.describe(), error)
            first_line = (str(error).strip().splitlines() or [""])[0][:200]
            why = f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__
            answer.set_result(harness_error(job, f"the cluster's evaluation pool failed: {why}"))

        pending.add_done_callback(settle)
        return answer

    def submit_many(self, jobs: Iterable[Job]) -> list[Future[StageResult]]:
        """Queues a batch; their futures, in the batch's order."""
        return [self.submit(job) for job in jobs]

    def run(self, job: Job) -> StageResult:
        """Submits ``job`` and waits for its result."""
        return self.submit(job).result()

    def stats(self) -> PoolStats:
        """A look at the shared pool (every process's jobs)."""
        import ray

        return ray.get(self._handle().stats.remote(), timeout=CALL_TIMEOUT_S)

    def shutdown(self) -> None:
        """Stops the service and its workers for every process that uses it; a later job starts a new one."""
        stop_cluster_pool(self.name, self.backend)
        with self._lock:
            self._service = None


def stop_cluster_pool(name: str, backend: str) -> bool:
    """Stops the cluster pool ``name`` of ``backend`` (its workers end with it); returns whether one was running."""
    import ray

    try:
        service = ray.get_actor(service_name(name, backend), namespace=NAMESPACE)
    except ValueError:
        return False
    try:
        ray.get(service.shutdown.remote(), timeout=CALL_TIMEOUT_S)
    except Exception as exc:  # it is killed below all the same
        logger.warning("cluster pool %s: its shutdown failed: %r", name, exc)
    ray.kill(service)
    return True
