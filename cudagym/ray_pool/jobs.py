"""The messages between an environment (or a trainer) and the Ray evaluation pool.

A :class:`Job` is one evaluation stage (compile, verify, profile or submit) of one candidate: the task, the
backend, the environment's evaluation settings and a fixed copy of the candidate's workspace
(:class:`~cudagym.workspace.WorkspaceSnapshot`). Everything in it travels to a worker through Ray's object store;
the worker rebuilds the workspace from the copy and runs the same evaluator a local environment runs. The answer is
the stage's own result dataclass from :mod:`cudagym.results` (``CompileResult``, ``VerifyResult``, ...): a failure
of the pool (no worker, a worker or node lost twice, the deadline passed) is such a result with
``Status.HARNESS_ERROR``, never an exception.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid

from cudagym.eval_config import EvalConfig
from cudagym.pool.jobs import JobStage, TaskKey, stage_deadline, stage_failure, task_key
from cudagym.results import StageResult
from cudagym.tasks.task import Task
from cudagym.workspace import WorkspaceSnapshot


@dataclasses.dataclass(frozen=True)
class Job:
    """One stage of one candidate, as the pool runs it.

    Attributes:
        stage: which evaluation to run.
        task: the task (its reference source and metadata travel with it).
        backend: the backend's name ("cpu" or "cuda"); it picks the workers that may run the job.
        config: the environment's evaluation settings.
        workspace: the candidate's files and the workspace's fixed files, as they were when the job was made.
        client: who submitted it (an environment, a trainer): the pool queues clients fairly, round robin.
        ncu: a profile with Nsight Compute's report (``profile(ncu=True)``).
        deadline_s: seconds the job may run on a worker (default: :func:`stage_deadline` of the env's settings).
        job_id: unique, for logs.
    """

    stage: JobStage
    task: Task
    backend: str
    config: EvalConfig
    workspace: WorkspaceSnapshot
    client: str = "default"
    ncu: bool = False
    deadline_s: float | None = None
    job_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        if not isinstance(self.stage, JobStage):
            raise TypeError(f"stage must be a JobStage, got {self.stage!r}")
        if self.backend not in ("cpu", "cuda"):
            raise ValueError(f"backend must be 'cpu' or 'cuda', got {self.backend!r}")
        if self.ncu and self.stage is not JobStage.PROFILE:
            raise ValueError("ncu=True only goes with the profile stage")
        if self.deadline_s is not None and self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {self.deadline_s}")

    @functools.cached_property
    def key(self) -> TaskKey:
        """Which evaluators may serve it, as a worker's hosted pool shares them (``cudagym.pool.jobs.task_key``): the
        Ray pool sends a job where its key is warm. Computed once."""
        return task_key(self.task, self.backend, self.config)

    @property
    def run_deadline_s(self) -> float:
        """Seconds the job may run once a worker has it."""
        return self.deadline_s if self.deadline_s is not None else stage_deadline(self.stage, self.config)

    def describe(self) -> str:
        return f"{self.stage.value} of {self.task.id} on {self.backend} (job {self.job_id}, client {self.client})"


def harness_error(job: Job, reason: str, started: float | None = None) -> StageResult:
    """The job's stage result saying that the pool (not the candidate) failed, and why."""
    return stage_failure(job.stage, reason, started)
