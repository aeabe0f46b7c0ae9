"""The environment's side of the machine pool in the pool's own process: an ``Evaluator`` that submits jobs.

Environments in another process reach the pool through ``cudagym pool``'s socket with the service's client
(:class:`~cudagym.service.ServiceEvaluatorFactory`, unchanged); its server gives each session a
:class:`PoolEvaluator` (:mod:`cudagym.pool.server`). Environments running as threads of the pool's process (a
trainer's, a test's) use :class:`PoolEvaluatorFactory` directly::

    pool = EvaluationPool(resolve_backend("cpu"))
    env = gym.make("CudaKernel-v0", evaluator_factory=PoolEvaluatorFactory(pool))
"""

from __future__ import annotations

import dataclasses
import itertools

from cudagym.backends import Backend
from cudagym.eval_config import EvalConfig
from cudagym.pool.jobs import JobEvaluator, JobStage, PoolJob
from cudagym.pool.pool import EvaluationPool
from cudagym.results import StageResult
from cudagym.tasks.task import Task
from cudagym.workspace import Workspace

_SESSIONS = itertools.count(1)


class PoolEvaluator(JobEvaluator):
    """One environment's session on the pool (the ``Evaluator`` protocol of ``cudagym.evaluator``): each call is a
    job of its session, answered by the pool's evaluators; ``retarget`` only changes the task its jobs name."""

    def __init__(
        self, pool: EvaluationPool, task: Task, backend: Backend, config: EvalConfig, *, session: str = ""
    ) -> None:
        if backend.name != pool.backend.name:
            raise ValueError(f"the pool runs the {pool.backend.name} backend, the environment asked for {backend.name}")
        self.pool = pool
        self.task = task
        self.backend = backend
        self.config = config
        self.session = session or f"session-{next(_SESSIONS)}"
        pool.prepare(task, config)

    def _run(self, stage: JobStage, workspace: Workspace, *, ncu: bool = False) -> StageResult:
        job = PoolJob(stage, self.task, self.backend.name, self.config, workspace, session=self.session, ncu=ncu)
        return self.pool.run(job)

    def retarget(self, task: Task) -> None:
        """Names ``task`` in the session's next jobs (the pool's evaluator of that task serves them)."""
        if task is not self.task:
            self.task = task
            self.pool.prepare(task, self.config)

    def close(self) -> None:
        """Nothing to stop: the pool keeps the evaluators for other sessions."""


@dataclasses.dataclass(frozen=True)
class PoolEvaluatorFactory:
    """An ``evaluator_factory`` for ``CudaKernelEnv`` that evaluates on ``pool`` (in this process)."""

    pool: EvaluationPool

    def __call__(self, task: Task, backend: Backend, config: EvalConfig) -> PoolEvaluator:
        return PoolEvaluator(self.pool, task, backend, config)
