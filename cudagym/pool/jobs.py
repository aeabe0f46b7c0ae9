"""The jobs of an evaluation pool: which stage, for whom, on what, and by when.

A :class:`PoolJob` is one evaluation stage (compile, verify, profile or submit) of one environment's workspace on this
machine: the task, the environment's evaluation settings, the workspace itself (the pool evaluates it where it is, as
a local evaluator does), the session it came from (the queue takes sessions in turn) and its deadline, which is its
environment's: the env's own stage bounds (:func:`stage_deadline`) counted from when the job was submitted, so time
spent in the queue counts. The answer is the stage's own result dataclass; a failure of the pool is such a result
with ``Status.HARNESS_ERROR`` (:func:`stage_failure`), never an exception.

:class:`JobStage` and :func:`stage_deadline` are shared with the Ray pool (:mod:`cudagym.ray_pool.jobs`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import itertools
import time

from cudagym import results
from cudagym.codec import decode, encode
from cudagym.eval_config import EvalConfig
from cudagym.evaluator import Evaluator
from cudagym.results import CompileResult, ProfileResult, Stage, StageResult, Status, SubmitResult, VerifyResult
from cudagym.tasks.task import Task
from cudagym.text import clean
from cudagym.workspace import Workspace

DEADLINE_MARGIN_S = 60.0  # the run time a job is given beyond its env's stage timeouts (imports, a build)
COMPILE_ALLOWANCE_S = 300.0  # a build's bound (``BuildOptions.timeout_seconds``'s default) for the compile stage
_JOB_IDS = itertools.count(1)


class JobStage(enum.Enum):
    """The evaluation stages a pool runs (the file tools stay in the environment)."""

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
    """Seconds a job of ``stage`` may take: the env's own bounds for that stage, plus a margin.

    A job past it comes back as a harness error (its evaluator, taken to be stuck, is replaced)."""
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


def stage_failure(stage: JobStage, reason: str, started: float | None = None) -> StageResult:
    """``stage``'s result saying that the pool (not the candidate) failed, and why (``started``: when the job was
    submitted, for its ``seconds``)."""
    seconds = time.monotonic() - started if started is not None else 0.0
    return stage.result_type(
        stage=stage.stage,
        status=Status.HARNESS_ERROR,
        seconds=seconds,
        message=f"The evaluation pool failed: {clean(reason, 1500)}",
    )


TaskKey = tuple[str, str, str, str]
"""What makes two jobs' evaluators interchangeable (:func:`task_key`)."""


def task_key(task: Task, backend: str, config: EvalConfig) -> TaskKey:
    """Jobs of one key may share an evaluator: the same backend, task (id, reference source for the backend and
    metadata) and evaluation settings. Content, not only the id: two task sets may reuse an id for different code.
    The metadata and settings are compared in their wire form read back (:func:`canonical`), so a session whose
    settings came over the service's socket (``60`` read back as ``60.0``) shares with one in this process."""
    settings = canonical(config)
    content = hashlib.sha256()
    for part in (task.source_for(backend), canonical(task.metadata), settings):
        content.update(part.encode("utf-8", "surrogatepass") + b"\0")
    return backend, task.id, content.hexdigest()[:20], hashlib.sha256(settings.encode()).hexdigest()[:12]


def canonical(value: object) -> str:
    """The repr of a dataclass after a trip through the service's wire format (``encode`` then ``decode``)."""
    return repr(decode(type(value), encode(value)))


@dataclasses.dataclass(eq=False)
class PoolJob:
    """One stage of one environment's workspace, as the machine's pool runs it.

    Attributes:
        stage: which evaluation to run.
        task: the task (its reference source and metadata).
        config: the environment's evaluation settings.
        workspace: the environment's workspace (a directory on this machine; a server's view of it is an
            ``AttachedWorkspace``); the job reads it when it runs.
        session: who submitted it (an environment's session): the queue takes sessions in turn.
        ncu: a profile with Nsight Compute's report (``profile(ncu=True)``).
        deadline_s: seconds from submission within which it must be answered (default: :func:`stage_deadline`).
    """

    stage: JobStage
    task: Task
    backend: str
    config: EvalConfig
    workspace: Workspace
    session: str = "default"
    ncu: bool = False
    deadline_s: float | None = None
    submitted: float = dataclasses.field(default_factory=time.monotonic)
    job_id: int = dataclasses.field(default_factory=lambda: next(_JOB_IDS))

    def __post_init__(self) -> None:
        if not isinstance(self.stage, JobStage):
            raise TypeError(f"stage must be a JobStage, got {self.stage!r}")
        if self.ncu and self.stage is not JobStage.PROFILE:
            raise ValueError("ncu=True only goes with the profile stage")
        if self.deadline_s is not None and self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be positive, got {self.deadline_s}")

    @functools.cached_property
    def key(self) -> TaskKey:
        """Which evaluators may serve it (:func:`task_key`), computed once."""
        return task_key(self.task, self.backend, self.config)

    @property
    def deadline(self) -> float:
        """When (``time.monotonic()``) the job must have been answered."""
        allowed = self.deadline_s if self.deadline_s is not None else stage_deadline(self.stage, self.config)
        return self.submitted + allowed

    def describe(self) -> str:
        return f"{self.stage.value} of {self.task.id} (job {self.job_id}, session {self.session})"

    def failure(self, reason: str) -> StageResult:
        """This job's harness-error result (its seconds counted from submission)."""
        return stage_failure(self.stage, reason, self.submitted)


def run_stage(evaluator: Evaluator, stage: JobStage, workspace: Workspace, *, ncu: bool = False) -> StageResult:
    """Runs ``stage`` of ``workspace`` on ``evaluator`` (a pool's evaluator serving a job)."""
    if stage is JobStage.COMPILE:
        return evaluator.compile(workspace)
    if stage is JobStage.VERIFY:
        return evaluator.verify(workspace)
    if stage is JobStage.PROFILE:
        return evaluator.profile(workspace, ncu=ncu)
    return evaluator.submit(workspace)


class JobEvaluator:
    """The four stage calls of the ``Evaluator`` protocol, each made a job of a pool: a subclass says how one runs
    (``_run``). The environment's evaluators of both pools are such."""

    def _run(self, stage: JobStage, workspace: Workspace, *, ncu: bool = False) -> StageResult:
        raise NotImplementedError

    def compile(self, workspace: Workspace) -> CompileResult:
        return self._run(JobStage.COMPILE, workspace)  # type: ignore[return-value]

    def verify(self, workspace: Workspace) -> VerifyResult:
        return self._run(JobStage.VERIFY, workspace)  # type: ignore[return-value]

    def profile(self, workspace: Workspace, *, ncu: bool = False) -> ProfileResult:
        return self._run(JobStage.PROFILE, workspace, ncu=ncu)  # type: ignore[return-value]

    def submit(self, workspace: Workspace) -> SubmitResult:
        return self._run(JobStage.SUBMIT, workspace)  # type: ignore[return-value]
