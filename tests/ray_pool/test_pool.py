"""The pool on a cluster of this machine: batches, fair turns, lost workers and nodes, jobs that cannot run."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from cudagym.evaluator import EvalConfig
from cudagym.pool.fair_queue import FairQueue
from cudagym.ray_pool import Job, JobStage, RayPool, WorkerSpec
from cudagym.ray_pool.pool import _Entry
from cudagym.ray_pool.worker import ANSWER_MARGIN_S
from cudagym.results import Status
from cudagym.tasks import load
from cudagym.workspace import Workspace

ray = pytest.importorskip("ray")

RELU = "builtin/relu"
TOOLS = ("compile", "verify", "profile", "submit")


def relu_files() -> dict[str, str]:
    root = Path(load("builtin").get(RELU).solutions["cpu"])
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def relu_job(fast_config: EvalConfig, stage: JobStage, client: str = "test", **files: str) -> Job:
    """A job of ``stage`` for the ReLU task with ``files`` (default: its cpu solution)."""
    task = load("builtin").get(RELU)
    workspace = Workspace(task.source_for("cpu"), "instructions")
    try:
        for path, content in (files or relu_files()).items():
            workspace.write(path, content)
        return Job(stage, task, "cpu", fast_config, workspace.freeze(), client=client)
    finally:
        workspace.remove()


def test_the_queue_takes_clients_in_turn(fast_config: EvalConfig) -> None:
    job = relu_job(fast_config, JobStage.COMPILE)
    queue: FairQueue[_Entry] = FairQueue(lambda entry: entry.job.client)
    batch = [_Entry(dataclasses.replace(job, client="trainer"), Future()) for _ in range(3)]
    single = _Entry(dataclasses.replace(job, client="env"), Future())
    for entry in [*batch, single]:
        queue.put(entry)
    order = [queue.take(lambda e: e.job.backend == "cpu") for _ in range(4)]
    assert order == [batch[0], single, batch[1], batch[2]]
    assert queue.take(lambda e: e.job.backend == "cpu") is None and len(queue) == 0
    queue.put(single)
    assert queue.take(lambda e: e.job.backend == "cuda") is None and len(queue) == 1


def test_submit_many_answers_every_job_in_order(pool: RayPool, fast_config: EvalConfig) -> None:
    broken = relu_files()
    broken["kernels/relu.cpp"] += "\nthis is not C++;\n"
    jobs = [relu_job(fast_config, JobStage.VERIFY, client=f"rollout-{i}") for i in range(3)]
    jobs.append(relu_job(fast_config, JobStage.COMPILE, client="rollout-3", **broken))
    results = [f.result(timeout=240) for f in pool.submit_many(jobs)]
    assert [r.status for r in results] == [Status.OK] * 3 + [Status.COMPILE_ERROR]
    assert all(type(r) is j.stage.result_type for r, j in zip(results, jobs, strict=True))
    assert pool.stats().queued == 0


def test_a_worker_killed_mid_job_is_replaced_and_the_job_retried(pool: RayPool, fast_config: EvalConfig) -> None:
    replaced = pool.stats().replaced
    future = pool.submit(relu_job(fast_config, JobStage.VERIFY, client="victim"))
    victim = _running_worker(pool)
    os.kill(victim.info.pid, signal.SIGKILL)
    result = future.result(timeout=240)
    assert result.status is Status.OK, result.message
    stats = pool.stats()
    assert stats.replaced == replaced + 1 and stats.retried >= 1


def failing_job(fast_config: EvalConfig) -> Job:
    """A job its worker answers with a harness error: its hosted pool's deadline passes before the submit ends."""
    return dataclasses.replace(relu_job(fast_config, JobStage.SUBMIT), deadline_s=ANSWER_MARGIN_S + 0.2)


def test_a_harness_error_is_tried_on_another_worker_which_stays(pool: RayPool, fast_config: EvalConfig) -> None:
    # a worker runs many jobs at once: one job's harness error must not cost the others their worker
    before = pool.stats()
    result = pool.run(failing_job(fast_config))
    assert result.status is Status.HARNESS_ERROR and "deadline" in result.message
    after = pool.stats()
    assert after.retried == before.retried + 1
    assert after.replaced == before.replaced


def test_a_worker_answering_only_harness_errors_is_replaced(
    ray_cluster: Any, cache_dir: Path, fast_config: EvalConfig
) -> None:
    with RayPool(WorkerSpec("cpu", num_cpus=0, cache_dir=str(cache_dir))) as lone:
        for _ in range(2):  # tried twice each, on the only worker: the third harness error in a row replaces it
            assert lone.run(failing_job(fast_config)).status is Status.HARNESS_ERROR
        assert lone.stats().replaced == 1
        result = lone.run(relu_job(fast_config, JobStage.VERIFY))
    assert result.status is Status.OK, result.message


def test_a_job_of_a_backend_without_workers_is_a_harness_error(pool: RayPool, fast_config: EvalConfig) -> None:
    job = relu_job(fast_config, JobStage.COMPILE)
    cuda_job = Job(JobStage.VERIFY, job.task, "cuda", fast_config, job.workspace)
    result = pool.submit(cuda_job).result(timeout=5)
    assert result.status is Status.HARNESS_ERROR and "no cuda workers" in result.message


def test_a_job_no_worker_can_be_placed_for_is_a_harness_error(ray_cluster: Any, fast_config: EvalConfig) -> None:
    with RayPool(WorkerSpec("cpu", resources={"no_such_node": 1}), placement_timeout_s=1.5) as lonely:
        start = time.monotonic()
        result = lonely.submit(relu_job(fast_config, JobStage.COMPILE)).result(timeout=30)
    assert result.status is Status.HARNESS_ERROR and "could be placed" in result.message
    assert time.monotonic() - start < 20


def test_a_node_removed_mid_run_loses_no_job(ray_cluster: Any, cache_dir: Path, fast_config: EvalConfig) -> None:
    """A worker on a node that leaves: its jobs run again on the worker of the node that stays."""
    ray_cluster.add("node_c")
    ray_cluster.add("node_d")
    specs = [WorkerSpec("cpu", resources={label: 1}, cache_dir=str(cache_dir)) for label in ("node_c", "node_d")]
    with RayPool(specs, placement_timeout_s=60) as two:
        # distinct sources: each compile builds (a cached build would end before the node leaves)
        jobs = [relu_job(fast_config, JobStage.COMPILE, client=f"c{i}", **distinct(i)) for i in range(4)]
        futures = two.submit_many(jobs)
        _running_worker(two, node_label="node_c", cluster=ray_cluster)
        ray_cluster.cluster.remove_node(ray_cluster.nodes.pop("node_c"))
        results = [f.result(timeout=240) for f in futures]
        stats = two.stats()
    assert [r.status for r in results] == [Status.OK] * 4, [r.message for r in results]
    assert stats.retried >= 1 and stats.failed == 0 and stats.replaced >= 1


def distinct(i: int) -> dict[str, str]:
    """The ReLU solution with a kernel file of its own content (``i``)."""
    files = relu_files()
    files["kernels/relu.cpp"] += f"\nint cudagym_ray_test_marker_{i}() {{ return {i}; }}\n"
    return files


def _running_worker(pool: RayPool, node_label: str = "", cluster: Any = None, timeout_s: float = 60) -> Any:
    """The first worker seen running a job (on the node labelled ``node_label``, where given)."""
    node_id = cluster.nodes[node_label].node_id if node_label else None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for _, worker in pool.running_on():
            if worker.info is not None and (node_id is None or worker.info.node_id == node_id):
                return worker
        time.sleep(0.02)
    raise AssertionError("no job started running in time")
