"""The pool's worker: one Ray actor that evaluates jobs with the same evaluator a local environment uses.

A worker owns real :class:`~cudagym.evaluator.LocalEvaluator` instances (each with its reference process, fork
server and candidate isolation), kept warm between jobs and shared by every environment whose jobs land on it: jobs
of one task and settings reuse one evaluator (the reference process, its loaded task and baselines stay), a job of
another task takes an idle evaluator over (``retarget`` keeps its processes), and the least recently used idle one
is closed beyond ``max_evaluators``. Each job's workspace is rebuilt from its snapshot in a fresh directory, evaluated
and removed; the result names the environment's workspace path, not the copy's.

Nothing the candidate reports decides a result here any more than in a local environment: the worker process plays
the environment's part (it builds, it never runs agent code), the reference process keeps the trusted clock.

The class is plain Python; :mod:`cudagym.ray_pool.workers` makes it a Ray actor with the resources it needs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path

from cudagym.backends import resolve_backend
from cudagym.codec import encode
from cudagym.evaluator import LocalEvaluator
from cudagym.pool.jobs import run_stage
from cudagym.ray_pool.jobs import Job, harness_error
from cudagym.results import StageResult
from cudagym.service import decode_result
from cudagym.workspace import Workspace, WorkspaceError

logger = logging.getLogger(__name__)

EvaluatorKey = tuple[str, int, str]  # task id, hash of the task's source for the backend, the settings' repr


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """Where a started worker runs (its answer to ``ready``)."""

    node_id: str
    pid: int
    backend: str


class EvalWorker:
    """Runs jobs of one backend; up to its actor's ``max_concurrency`` at a time, each on an evaluator of its own.

    Args:
        backend: "cpu" or "cuda" (a cuda worker is given one GPU by Ray, ``num_gpus=1``).
        cache_dir: compiled objects, precompiled headers and baselines (default: ``~/.cache/cudagym``); workers of
            one machine share it.
        max_evaluators: idle evaluators kept warm beyond those in use.
    """

    def __init__(self, backend: str, cache_dir: str | None = None, max_evaluators: int = 4) -> None:
        if max_evaluators < 1:
            raise ValueError(f"max_evaluators must be >= 1, got {max_evaluators}")
        self.backend = resolve_backend(backend)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.max_evaluators = max_evaluators
        self._idle: OrderedDict[int, tuple[EvaluatorKey, LocalEvaluator]] = OrderedDict()  # least recent first
        self._busy = 0
        self._lock = threading.Lock()
        self._jobs_done = 0

    def ready(self) -> WorkerInfo:
        """Answers once the actor is placed and constructed."""
        import ray

        return WorkerInfo(ray.get_runtime_context().get_node_id(), os.getpid(), self.backend.name)

    def jobs_done(self) -> int:
        return self._jobs_done

    # -- evaluators --------------------------------------------------------------------------------

    @staticmethod
    def key(job: Job) -> EvaluatorKey:
        """Jobs of one key may share an evaluator: the same task (id and source) and settings."""
        return job.task.id, hash(job.task.source_for(job.backend)), repr(job.config)

    def _acquire(self, job: Job) -> LocalEvaluator:
        """An evaluator for the job: a warm one of the same task and settings, else an idle one of the same
        settings retargeted to the task, else a new one."""
        key = self.key(job)
        with self._lock:
            self._busy += 1
            for slot, (idle_key, evaluator) in reversed(self._idle.items()):
                if idle_key == key:
                    del self._idle[slot]
                    return evaluator
            full = len(self._idle) >= self.max_evaluators
            for slot, (idle_key, evaluator) in self._idle.items():
                if full and idle_key[2] == key[2] and idle_key[0] != key[0]:
                    del self._idle[slot]
                    evaluator.retarget(job.task)  # keeps its processes; the reference reloads on its next use
                    return evaluator
        logger.debug("worker %d: a new evaluator for %s", os.getpid(), job.task.id)
        return LocalEvaluator(job.task, self.backend, job.config, cache_dir=self.cache_dir)

    def _release(self, job: Job, evaluator: LocalEvaluator) -> None:
        """Keeps the evaluator warm; closes the least recently used idle ones beyond ``max_evaluators``."""
        surplus: list[LocalEvaluator] = []
        with self._lock:
            self._busy -= 1
            self._idle[id(evaluator)] = (self.key(job), evaluator)
            while len(self._idle) > self.max_evaluators:
                surplus.append(self._idle.popitem(last=False)[1][1])
        for old in surplus:
            old.close()

    # -- jobs --------------------------------------------------------------------------------------

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
            evaluator = self._acquire(job)
            try:
                result = run_stage(evaluator, job.stage, workspace, ncu=job.ncu)
            finally:
                self._release(job, evaluator)
            self._jobs_done += 1
            return relocate(result, str(workspace.path), job.workspace.path)
        except Exception as exc:  # the evaluator itself returns results; this is the worker failing
            logger.exception("worker %d: %s failed", os.getpid(), job.describe())
            return harness_error(job, f"{type(exc).__name__}: {exc}", start)
        finally:
            workspace.remove()

    def shutdown(self) -> None:
        """Closes every evaluator (their reference processes and candidates)."""
        with self._lock:
            evaluators = [evaluator for _, evaluator in self._idle.values()]
            self._idle.clear()
        for evaluator in evaluators:
            evaluator.close()


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
