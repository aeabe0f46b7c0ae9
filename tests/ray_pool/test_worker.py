"""A Ray worker's own part, without Ray: the jobs it is sent run through the machine pool it hosts.

``EvalWorker`` is a plain class (Ray makes it an actor), so these tests call it as the actor's threads would: jobs of
one task share an evaluator, the worker never keeps more evaluators than its bound however many jobs it holds (on cuda
the same pool admits them by the device's free memory, ``tests/gpu/test_ray_gpu.py``), a job answered by the hosted
pool's deadline is a harness error that comes before the Ray pool's own, and the result names the env's workspace.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cudagym.evaluator import EvalConfig
from cudagym.ray_pool import Job, JobStage
from cudagym.ray_pool.worker import ANSWER_MARGIN_S, EvalWorker
from cudagym.results import Status
from cudagym.tasks import load
from cudagym.workspace import Workspace

TASKS = ("builtin/relu", "builtin/elu")


def solution_job(
    task_id: str, config: EvalConfig, stage: JobStage, client: str, broken: bool = False, **job: object
) -> Job:
    """A job of ``stage`` for ``task_id``'s cpu solution (``broken``: its ``model_new.py`` raises where it is
    imported), made the way an env's ``RayEvaluator`` makes one."""
    task = load("builtin").get(task_id)
    root = Path(task.solutions["cpu"])
    workspace = Workspace(task.source_for("cpu"), "instructions")
    try:
        for path in (p for p in root.rglob("*") if p.is_file()):
            content = path.read_text()
            if broken and path.name == "model_new.py":
                content = "import os\nraise RuntimeError(f'refused in {os.getcwd()}')\n" + content
            workspace.write(str(path.relative_to(root)), content)
        return Job(stage, task, "cpu", config, workspace.freeze(), client=client, **job)  # type: ignore[arg-type]
    finally:
        workspace.remove()


@pytest.fixture
def worker(cache_dir: Path) -> Iterator[EvalWorker]:
    """A cpu worker that keeps one evaluator and takes four jobs at once."""
    made = EvalWorker("cpu", str(cache_dir), max_evaluators=1, concurrency=4)
    yield made
    made.shutdown()


def test_jobs_beyond_the_evaluator_bound_wait_in_the_hosted_pool(worker: EvalWorker, fast_config: EvalConfig) -> None:
    # two task keys (one task under two settings: one build serves both), one place for an evaluator
    other = dataclasses.replace(fast_config, num_checks=fast_config.num_checks + 1)
    configs = (fast_config, other)
    jobs = [solution_job(TASKS[0], config, JobStage.VERIFY, f"env-{n}") for n, config in enumerate(configs)]
    most = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal most
        while not stop.is_set():
            evaluators = worker.stats().evaluators
            most = max(most, evaluators.leased + evaluators.idle)
            stop.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(len(jobs)) as threads:  # as the actor's threads run them
            results = list(threads.map(worker.run, jobs))
    finally:
        stop.set()
        watcher.join()
    assert [r.status for r in results] == [Status.OK] * 2, [r.message for r in results]
    assert most == 1
    stats = worker.stats()
    assert stats.done == 2 and stats.failed == 0
    assert stats.evaluators.created == 2  # the two keys took the one place in turn
    assert worker.jobs_done() == 2


def test_jobs_of_one_task_share_an_evaluator(worker: EvalWorker, fast_config: EvalConfig) -> None:
    for stage in (JobStage.VERIFY, JobStage.PROFILE, JobStage.SUBMIT):
        result = worker.run(solution_job(TASKS[0], fast_config, stage, "env-0"))
        assert result.status is Status.OK, result.message
    assert worker.stats().evaluators.created == 1


def test_the_result_names_the_envs_workspace_not_the_workers_copy(worker: EvalWorker, fast_config: EvalConfig) -> None:
    job = solution_job(TASKS[0], fast_config, JobStage.VERIFY, "env-0", broken=True)
    result = worker.run(job)
    assert result.status is not Status.OK and "refused in" in repr(result), result
    # the candidate named the directory it ran in: the worker's copy (a workspace directory of the same kind)
    named = set(re.findall(re.escape(os.path.dirname(job.workspace.path)) + r"/cudagym-ws-\w+", repr(result)))
    assert named == {job.workspace.path}


def test_the_hosted_pool_answers_before_the_ray_pools_deadline(worker: EvalWorker, fast_config: EvalConfig) -> None:
    # the Ray pool replaces a worker that has not answered by a job's deadline; the hosted pool answers first
    job = solution_job(TASKS[1], fast_config, JobStage.SUBMIT, "env-0", deadline_s=ANSWER_MARGIN_S + 0.5)
    result = worker.run(job)
    assert result.status is Status.HARNESS_ERROR
    assert "deadline" in result.message
    assert result.seconds < job.run_deadline_s


def test_a_job_of_another_backend_is_a_harness_error(worker: EvalWorker, fast_config: EvalConfig) -> None:
    job = solution_job(TASKS[0], fast_config, JobStage.VERIFY, "env-0")
    result = worker.run(Job(job.stage, job.task, "cuda", fast_config, job.workspace))
    assert result.status is Status.HARNESS_ERROR
    assert "cpu worker was given a cuda job" in result.message


def test_the_evaluator_bound_must_be_positive(cache_dir: Path) -> None:
    with pytest.raises(ValueError, match="max_evaluators"):
        EvalWorker("cpu", str(cache_dir), max_evaluators=0)
