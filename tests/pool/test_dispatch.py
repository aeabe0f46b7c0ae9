"""The pool's dispatcher with stand-in evaluators (no processes): fairness, sharing, bounds, eviction and failures.

The stand-ins record what the pool asks of them; real evaluators are in ``test_sharing.py`` and ``test_many_envs.py``.
"""

from __future__ import annotations

import os
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from cudagym.backends import resolve_backend
from cudagym.eval_config import EvalConfig
from cudagym.pool import EvaluationPool, JobStage, PoolJob, PoolLimits
from cudagym.pool.pool import RETRIES
from cudagym.results import ProfileResult, Stage, Status, VerifyResult
from cudagym.tasks.task import Task, TaskMetadata
from cudagym.workspace import Workspace

CPU = resolve_backend("cpu")
CONFIG = EvalConfig()
SOURCE = "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * {k}\n"


def task(k: int) -> Task:
    return Task(id=f"stub/{k}", name=f"times {k}", source=SOURCE.format(k=k), metadata=TaskMetadata())


class StubEvaluator:
    """Answers verify after ``hold`` seconds (or once ``release`` is set), recording the sessions it served."""

    made: list[StubEvaluator] = []

    def __init__(self, task: Task, config: EvalConfig, log: list[str], hold: float = 0.0) -> None:
        self.task, self.log, self.hold = task, log, hold
        self.closed = threading.Event()
        self.release = threading.Event()
        self.raises = False
        self.pids: list[int] = []

    def verify(self, workspace: Workspace) -> VerifyResult:
        if self.raises:
            raise RuntimeError("the evaluator broke")
        if self.hold < 0:  # stuck until closed
            self.closed.wait(30)
            return VerifyResult(Stage.VERIFY, Status.HARNESS_ERROR, "closed while it ran")
        time.sleep(self.hold)
        self.log.append(workspace.path.name)
        return VerifyResult(Stage.VERIFY, Status.OK, f"{self.task.id} ok")

    def process_ids(self) -> list[int]:
        return self.pids

    def close(self) -> None:
        self.closed.set()


@pytest.fixture
def made() -> list[StubEvaluator]:
    return []


def make_pool(made: list[StubEvaluator], log: list[str], hold: float = 0.0, **limits: object) -> EvaluationPool:
    def make(task: Task, config: EvalConfig) -> StubEvaluator:
        made.append(StubEvaluator(task, config, log, hold))
        return made[-1]

    bounds = {"max_evaluators": 2, "max_per_task": 1, "compile_workers": 1, **limits}
    return EvaluationPool(CPU, limits=PoolLimits(**bounds), make_evaluator=make)  # type: ignore[arg-type]


@pytest.fixture
def workspaces() -> Callable[[str], Workspace]:
    """Stand-in workspaces named by session (the stand-in evaluator logs the name; verify jobs read nothing else)."""
    return lambda name: types.SimpleNamespace(path=Path(name))  # type: ignore[return-value]


def job(t: Task, ws: Workspace, session: str, **kw: object) -> PoolJob:
    return PoolJob(JobStage.VERIFY, t, "cpu", CONFIG, ws, session=session, **kw)  # type: ignore[arg-type]


def test_sessions_are_served_in_turn_and_share_one_evaluator_per_task(made, workspaces) -> None:
    log: list[str] = []
    pool = make_pool(made, log, hold=0.15)
    try:
        t = task(1)
        busy = [pool.submit(job(t, workspaces("a"), "a")) for _ in range(8)]  # one session floods the queue
        time.sleep(0.03)  # a's first job runs
        late = [pool.submit(job(t, workspaces(s), s)) for s in ("b", "c")]
        results = [f.result(timeout=30) for f in (*busy, *late)]
    finally:
        pool.close()
    assert all(r.status is Status.OK for r in results)
    assert len(made) == 1, "jobs of one task from three sessions did not share its evaluator"
    # b and c are served in the next turns (a's second job had its turn before they came), not after a's backlog
    assert log[:5] == ["a", "a", "b", "c", "a"], log


def test_a_second_evaluator_for_a_task_only_while_its_jobs_queue(made, workspaces) -> None:
    log: list[str] = []
    pool = make_pool(made, log, hold=0.2, max_evaluators=4, max_per_task=2)
    try:
        t = task(1)
        pool.run(job(t, workspaces("a"), "a"))
        assert len(made) == 1
        pool.run(job(t, workspaces("b"), "b"))  # one at a time: the idle evaluator serves it
        assert len(made) == 1
        both = [pool.submit(job(t, workspaces(s), s)) for s in ("a", "b", "c")]  # three at once: two evaluators
        assert all(f.result(timeout=30).ok for f in both)
    finally:
        pool.close()
    assert len(made) == 2 and pool.stats().evaluators.created == 2


def test_least_recently_used_idle_evaluator_is_closed_at_the_count_bound(made, workspaces) -> None:
    log: list[str] = []
    pool = make_pool(made, log, max_evaluators=2)
    try:
        for k in (1, 2, 1, 3):  # task 2's evaluator is the least recently used when task 3 comes
            assert pool.run(job(task(k), workspaces("a"), "a")).ok
        stats = pool.stats().evaluators
        assert made[1].closed.wait(5) and not made[0].closed.is_set() and not made[2].closed.is_set()
    finally:
        pool.close()
    assert [e.task.id for e in made] == ["stub/1", "stub/2", "stub/3"]
    assert stats.evicted == 1 and stats.idle == 2 and stats.keys == 2


def test_idle_evaluators_are_closed_above_the_memory_bound(made, workspaces, monkeypatch) -> None:
    monkeypatch.setattr("cudagym.pool.pool.EXPIRE_EVERY_S", 0.0)
    log: list[str] = []
    pool = make_pool(made, log, memory_bytes=1)  # any process is too much
    try:
        assert pool.run(job(task(1), workspaces("a"), "a")).ok
        made[0].pids = [os.getpid()]
        assert made[0].closed.wait(5), "the idle evaluator over the memory bound was not closed"
        stats = pool.stats().evaluators
        assert stats.idle == 0 and stats.evicted == 1 and stats.resident_bytes > 1
        assert pool.run(job(task(1), workspaces("a"), "a")).ok  # a new one serves the task
    finally:
        pool.close()
    assert len(made) == 2


def test_an_evaluator_that_raises_is_replaced_and_its_job_is_a_harness_error(made, workspaces) -> None:
    log: list[str] = []
    pool = make_pool(made, log)
    try:
        assert pool.run(job(task(1), workspaces("a"), "a")).ok
        made[0].raises = True
        broken = pool.run(job(task(1), workspaces("a"), "a"))
        after = pool.run(job(task(1), workspaces("b"), "b"))
    finally:
        pool.close()
    assert isinstance(broken, VerifyResult) and broken.status is Status.HARNESS_ERROR
    assert "the evaluator broke" in broken.message
    assert made[0].closed.is_set() and len(made) == 2 and after.ok


def test_a_job_past_its_deadline_is_answered_and_its_stuck_evaluator_closed(made, workspaces) -> None:
    log: list[str] = []
    pool = make_pool(made, log, hold=-1)
    try:
        start = time.monotonic()
        stuck = pool.submit(job(task(1), workspaces("a"), "a", deadline_s=0.5))
        queued = pool.submit(job(task(1), workspaces("b"), "b", deadline_s=0.3))  # waits for the stuck evaluator
        first, second = stuck.result(timeout=10), queued.result(timeout=10)
        took = time.monotonic() - start
        assert made[0].closed.wait(5)
    finally:
        pool.close()
    assert first.status is Status.HARNESS_ERROR and "ran past its deadline" in first.message
    assert second.status is Status.HARNESS_ERROR and "waited in the queue past its deadline" in second.message
    assert took < 3, took


def test_a_closed_pool_answers_with_harness_errors(made, workspaces) -> None:
    pool = make_pool(made, [])
    pool.close()
    result = pool.run(job(task(1), workspaces("a"), "a"))
    assert result.status is Status.HARNESS_ERROR and "shut down" in result.message


def test_at_the_count_bound_a_busy_task_waits_for_its_evaluator_rather_than_close_another_tasks(
    made, workspaces
) -> None:
    """Two places, task 1 busy and task 2 idle: a second job of task 1 waits for task 1's evaluator. Closing task 2's
    to start a second one of task 1 would only move the wait to task 2's next job, which must then load its reference
    and baselines again (the churn seen with three tasks in two places on an 80 GB GPU)."""
    log: list[str] = []
    pool = make_pool(made, log, max_evaluators=2, max_per_task=2)
    try:
        assert pool.run(job(task(2), workspaces("b"), "b")).ok  # task 2's evaluator, idle from now on
        first = pool.submit(job(task(1), workspaces("a"), "a"))
        time.sleep(0.1)
        made[1].hold = 0.3
        both = [first, *(pool.submit(job(task(1), workspaces(s), s)) for s in ("c", "d"))]
        assert all(f.result(timeout=30).ok for f in both)
        evicted = pool.stats().evaluators.evicted
        assert not made[0].closed.wait(0.2), "task 2's idle evaluator was closed for a second one of task 1"
    finally:
        pool.close()
    assert [e.task.id for e in made] == ["stub/2", "stub/1"], [e.task.id for e in made]
    assert evicted == 0


def test_more_tasks_than_places_take_turns_instead_of_closing_each_other_after_every_job(
    made, workspaces, monkeypatch
) -> None:
    """Three busy tasks, two places: a queued task's job closes an idle evaluator whose own task has jobs waiting only
    once that evaluator has served its turn (a few times its bring-up), so evaluators are built a few times, not once
    per job (the churn of three 36 GiB tasks on an 80 GB GPU), and the third task is still served while the others
    have work left."""
    monkeypatch.setattr("cudagym.pool.evaluators.TURN_MIN_S", 0.0)
    log: list[str] = []
    served: list[tuple[str, float]] = []
    pool = make_pool(made, log, hold=0.02, max_evaluators=2)
    original = StubEvaluator.verify

    def verify(self: StubEvaluator, workspace: Workspace) -> VerifyResult:
        if not getattr(self, "up", False):  # its first job loads the reference: the bring-up a turn is measured in
            time.sleep(0.1)
            self.up = True
        result = original(self, workspace)
        served.append((self.task.id, time.monotonic()))
        return result

    monkeypatch.setattr(StubEvaluator, "verify", verify)
    try:
        futures = [pool.submit(job(task(k), workspaces(f"s{k}"), f"s{k}")) for _ in range(40) for k in (1, 2, 3)]
        assert all(f.result(timeout=60).ok for f in futures)
        stats = pool.stats().evaluators
    finally:
        pool.close()
    # without turns an idle evaluator is closed for the next task after most jobs: a build for most of the 120
    assert len(made) <= 12, f"{len(made)} evaluators built for 120 jobs of three tasks in two places"
    assert stats.evicted == len(made) - 2
    first_of_3 = min(at for t, at in served if t == "stub/3")
    last = max(max(at for t, at in served if t == other) for other in ("stub/1", "stub/2"))
    assert first_of_3 < last, "task 3 waited until tasks 1 and 2 had no work left"


def test_an_idle_evaluator_whose_task_waits_is_closed_for_another_only_after_its_turn() -> None:
    """The rule on its own: with task 1's jobs queued, its idle evaluator is not closed for task 2 before its turn is
    served, and is once it has been; without jobs of task 1 queued, at once."""
    from cudagym.pool.evaluators import EvaluatorSet, served_its_turn
    from cudagym.pool.jobs import task_key

    one, two = (task_key(task(k), "cpu", CONFIG) for k in (1, 2))
    evaluators = EvaluatorSet(lambda t, c: StubEvaluator(t, c, []), PoolLimits(max_evaluators=1))  # type: ignore[arg-type, return-value]
    lease, _ = evaluators.lease(one)
    assert lease is not None
    evaluators.build(lease, task(1), CONFIG)
    lease.born -= 2.0  # its first job took two seconds
    evaluators.release(lease, healthy=True)
    assert lease.bring_up_seconds >= 2.0 and not served_its_turn(lease, time.monotonic())
    assert evaluators.lease(two, queued={one, two}) == (None, []), "closed before its turn was served"
    shift = 8.0 * lease.bring_up_seconds  # its first job ended that long ago (the bring-up itself unchanged)
    lease.born -= shift
    lease.ready_at -= shift
    assert served_its_turn(lease, time.monotonic())
    second, closed = evaluators.lease(two, queued={one, two})
    assert second is not None and len(closed) == 1
    evaluators.release(second, healthy=False)
    third, _ = evaluators.lease(one)
    assert third is not None
    evaluators.build(third, task(1), CONFIG)
    evaluators.release(third, healthy=True)  # just up: its turn not served, but no job of task 1 waits
    fourth, closed = evaluators.lease(two, queued={two})
    assert fourth is not None and len(closed) == 1


class ProfilingStub(StubEvaluator):
    """Profiles: the first ``refusals`` profiles come back refused by a clock that calibrated beside other work (or
    with another harness error, ``message``), the later ones ok."""

    refusals = 1
    message = ""

    def profile(self, workspace: Workspace, *, ncu: bool = False) -> ProfileResult:
        if ProfilingStub.refusals > 0:
            ProfilingStub.refusals -= 1
            if ProfilingStub.message:
                return ProfileResult(Stage.PROFILE, Status.HARNESS_ERROR, ProfilingStub.message)
            return ProfileResult(
                Stage.PROFILE,
                Status.HARNESS_ERROR,
                "The device was busy while the trusted clock calibrated: no figure is trusted; profile again.",
                clock={"clock_quickened": 20, "handshakes": 20},
            )
        self.log.append(workspace.path.name)
        return ProfileResult(Stage.PROFILE, Status.OK, "timed", candidate_ms=1.0)


def profiling_pool(made: list[StubEvaluator], log: list[str]) -> EvaluationPool:
    def make(t: Task, config: EvalConfig) -> StubEvaluator:
        made.append(ProfilingStub(t, config, log))
        return made[-1]

    limits = PoolLimits(max_evaluators=2, max_per_task=1, compile_workers=1)
    return EvaluationPool(CPU, limits=limits, make_evaluator=make)  # type: ignore[arg-type]


def profile_job(t: Task, ws: Workspace, session: str) -> PoolJob:
    return PoolJob(JobStage.PROFILE, t, "cpu", CONFIG, ws, session=session)  # type: ignore[arg-type]


def profile_once(made, workspaces, monkeypatch, refusals: int, message: str = "") -> tuple[ProfileResult, object]:
    """One profile job through a pool of ``ProfilingStub`` s that refuse ``refusals`` times; its result and the pool's
    stats once it is answered."""
    monkeypatch.setattr(ProfilingStub, "refusals", refusals)
    monkeypatch.setattr(ProfilingStub, "message", message)
    log: list[str] = []
    pool = profiling_pool(made, log)
    try:
        result = pool.run(profile_job(task(1), workspaces("a"), "a"))
        if made and result.status is Status.HARNESS_ERROR and message:
            assert made[0].closed.wait(5)
        return result, pool.stats()  # type: ignore[return-value]
    finally:
        pool.close()


def test_a_profile_refused_for_a_disturbed_calibration_is_retried_on_the_same_evaluator(
    made, workspaces, monkeypatch
) -> None:
    result, stats = profile_once(made, workspaces, monkeypatch, refusals=2)
    assert result.ok and result.candidate_ms == 1.0
    assert len(made) == 1 and stats.evaluators.retired == 0 and stats.failed == 0
    assert made[0].log == ["a"]


def test_a_clock_that_stays_disturbed_ends_in_the_refusal_after_the_retries(made, workspaces, monkeypatch) -> None:
    result, _ = profile_once(made, workspaces, monkeypatch, refusals=100)
    assert result.status is Status.HARNESS_ERROR and "profile again" in result.message
    assert ProfilingStub.refusals == 100 - 1 - RETRIES and made[0].log == []


def test_another_harness_error_is_answered_at_once_and_its_evaluator_retired(made, workspaces, monkeypatch) -> None:
    died = "The evaluation harness failed: the reference process died"
    result, stats = profile_once(made, workspaces, monkeypatch, refusals=1, message=died)
    assert result.status is Status.HARNESS_ERROR and "reference process died" in result.message
    assert ProfilingStub.refusals == 0 and made[0].log == [] and stats.evaluators.retired == 1
