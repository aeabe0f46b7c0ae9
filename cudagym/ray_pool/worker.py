"""The pool's worker: one Ray actor that runs its jobs through the machine's evaluation pool.

A worker hosts one :class:`~cudagym.pool.EvaluationPool` (its node's, or its GPU's on cuda), the pool that envs of one
machine share without Ray: its evaluators are shared by every job of the same task and settings (the reference process,
its loaded task and baselines stay warm) and bounded in count; on cuda a new evaluator starts only when the device has
the memory for it (:mod:`cudagym.pool.admission`), so jobs of many tasks queue for memory instead of running the GPU out
of it; compiles run in its compile lane; a reference process that ran out of memory all the same, or a profile whose
clock calibrated beside other work, is tried again there. Each job's workspace is rebuilt from its snapshot in a fresh
directory, run as a :class:`~cudagym.pool.PoolJob` on it (the job's client is its session in the pool's fair queue)
and removed; the result names the environment's workspace path, not the copy's.

The Ray pool sends a worker at most ``concurrency`` jobs at once (its queue stays the fair one across the cluster), and
the hosted pool bounds its evaluators to what the device holds; a job answered by the hosted pool's deadline
(slightly inside the Ray pool's, so that the worker answers before it is taken to be stuck) is a harness error.

Nothing the candidate reports decides a result here any more than in a local environment: the worker process plays
the environment's part (it builds, it never runs agent code), the reference processes keep the trusted clock.

The class is plain Python; :mod:`cudagym.ray_pool.workers` makes it a Ray actor with the resources it needs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

from cudagym.backends import resolve_backend
from cudagym.codec import encode
from cudagym.pool.evaluators import PoolLimits
from cudagym.pool.jobs import PoolJob
from cudagym.pool.pool import EvaluationPool, PoolStats
from cudagym.ray_pool.jobs import Job, harness_error
from cudagym.results import StageResult
from cudagym.service import decode_result
from cudagym.workspace import Workspace, WorkspaceError

logger = logging.getLogger(__name__)

ANSWER_MARGIN_S = 5.0  # the hosted pool answers a job this much before the Ray pool's deadline for it


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """Where a started worker runs (its answer to ``ready``)."""

    node_id: str
    pid: int
    backend: str


class EvalWorker:
    """Runs jobs of one backend through a hosted :class:`~cudagym.pool.EvaluationPool`; up to its actor's
    ``max_concurrency`` at a time.

    Args:
        backend: "cpu" or "cuda" (a cuda worker is given one GPU by Ray, ``num_gpus=1``).
        cache_dir: compiled objects, precompiled headers and baselines (default: ``~/.cache/cudagym``); workers of
            one machine share it.
        max_evaluators: evaluators the worker keeps, busy or idle (default: the machine pool's for the backend: on
            cuda one per memory slot of the device, and only as many as its free memory admits).
        concurrency: jobs the actor takes at once (its ``max_concurrency``); the compile lane builds as many at once,
            up to the machine's cores.
    """

    def __init__(
        self,
        backend: str,
        cache_dir: str | None = None,
        max_evaluators: int | None = None,
        concurrency: int = 1,
    ) -> None:
        if max_evaluators is not None and max_evaluators < 1:
            raise ValueError(f"max_evaluators must be >= 1, got {max_evaluators}")
        self.backend = resolve_backend(backend)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        compile_workers = max(1, min(concurrency, os.cpu_count() or 1))
        limits = PoolLimits.for_backend(self.backend, max_evaluators=max_evaluators, compile_workers=compile_workers)
        self.pool = EvaluationPool(self.backend, cache_dir=self.cache_dir, limits=limits)
        self._jobs_done = 0

    def ready(self) -> WorkerInfo:
        """Answers once the actor is placed and constructed."""
        import ray

        return WorkerInfo(ray.get_runtime_context().get_node_id(), os.getpid(), self.backend.name)

    def jobs_done(self) -> int:
        return self._jobs_done

    def stats(self) -> PoolStats:
        """The hosted pool's jobs and evaluators now."""
        return self.pool.stats()

    def run(self, job: Job) -> StageResult:
        """Evaluates one job; whatever goes wrong comes back as the stage's result (a harness error at worst)."""
        start = time.monotonic()
        if job.backend != self.backend.name:
            return harness_error(job, f"a {self.backend.name} worker was given a {job.backend} job", start)
        try:
            workspace = Workspace.thaw(job.workspace)
        except (WorkspaceError, OSError) as exc:
            return harness_error(job, f"the workspace could not be rebuilt on the worker: {exc}", start)
        try:
            deadline_s = max(1.0, job.run_deadline_s - ANSWER_MARGIN_S)
            pool_job = PoolJob(
                job.stage,
                job.task,
                job.backend,
                job.config,
                workspace,
                session=job.client,
                ncu=job.ncu,
                deadline_s=deadline_s,
                submitted=start,
            )
            result = self.pool.run(pool_job)
            self._jobs_done += 1
            return relocate(result, str(workspace.path), job.workspace.path)
        except Exception as exc:  # the pool itself returns results; this is the worker failing
            logger.exception("worker %d: %s failed", os.getpid(), job.describe())
            return harness_error(job, f"{type(exc).__name__}: {exc}", start)
        finally:
            workspace.remove()

    def shutdown(self) -> None:
        """Closes the hosted pool: its evaluators (their reference processes and candidates)."""
        self.pool.close()


def relocate(result: StageResult, worker_path: str, client_path: str) -> StageResult:
    """``result`` with the worker's copy of the workspace named as the environment's workspace (whose path the
    environment removes from observations)."""
    if worker_path == client_path:
        return result

    def swap(value: object) -> object:
        if isinstance(value, str):
            return value.replace(worker_path, client_path)
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    return decode_result(type(result).__name__, swap(encode(result)))  # type: ignore[arg-type]
