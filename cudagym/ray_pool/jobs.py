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
import enum
import time
import uuid

from cudagym import results
from cudagym.eval_config import EvalConfig
from cudagym.results import Stage, StageResult, Status
from cudagym.tasks.task import Task
from cudagym.text import clean
from cudagym.workspace import WorkspaceSnapshot

DEADLINE_MARGIN_S = 60.0  # the run time a job is given beyond its env's stage timeouts (imports, a build)
COMPILE_ALLOWANCE_S = 300.0  # a build's bound (``BuildOptions.timeout_seconds``'s default) for the compile stage


class JobStage(enum.Enum):
    """The evaluation stages a worker runs (the file tools stay in the environment)."""

    COMPILE = "compile"
    VERIFY = "verify"
    PROFILE = "profile"
    SUBMIT = "submit"

    @property
    def result_type(self) -> type[StageResult]:
        """The result dataclass this stage answers with."""
        return _RESULT_TYPES[self]

    @property
    def stage(self) -> Stage:
        return Stage(self.value)


_RESULT_TYPES: dict[JobStage, type[StageResult]] = {
    JobStage.COMPILE: results.CompileResult,
    JobStage.VERIFY: results.VerifyResult,
    JobStage.PROFILE: results.ProfileResult,
    JobStage.SUBMIT: results.SubmitResult,
}


def stage_deadline(stage: JobStage, config: EvalConfig) -> float:
    """Seconds a job of ``stage`` may run on a worker: the env's own bounds for that stage, plus a margin.

    A worker past it is taken to be stuck (it is replaced) and the job comes back as a harness error."""
    build = config.build.timeout_seconds or COMPILE_ALLOWANCE_S
    run = {
        JobStage.COMPILE: 0.0,
        JobStage.VERIFY: config.verify_timeout,
        JobStage.PROFILE: config.profile_timeout,
        JobStage.SUBMIT: config.verify_timeout + config.profile_timeout,
    }[stage]
    # the reference process may load the task (reference_timeout) before a verify, profile or submit
    load = config.reference_timeout if stage is not JobStage.COMPILE else 0.0
    return build + run + load + DEADLINE_MARGIN_S


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

    @property
    def run_deadline_s(self) -> float:
        """Seconds the job may run once a worker has it."""
        return self.deadline_s if self.deadline_s is not None else stage_deadline(self.stage, self.config)

    def describe(self) -> str:
        return f"{self.stage.value} of {self.task.id} on {self.backend} (job {self.job_id}, client {self.client})"


def harness_error(job: Job, reason: str, started: float | None = None) -> StageResult:
    """The job's stage result saying that the pool (not the candidate) failed, and why."""
    seconds = time.monotonic() - started if started is not None else 0.0
    return job.stage.result_type(
        stage=job.stage.stage,
        status=Status.HARNESS_ERROR,
        seconds=seconds,
        message=f"The evaluation pool failed: {clean(reason, 1500)}",
    )
