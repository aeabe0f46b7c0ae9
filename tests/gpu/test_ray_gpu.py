"""The Ray pool on a GPU: a one-node cluster with one GPU, an env through ``evaluator="ray"`` on a built-in task."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.tasks import load

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.gpu
RELU = "builtin/relu"


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[None]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 1, "include_dashboard": False})
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    from cudagym.ray_pool import shutdown_pools

    shutdown_pools()
    ray.shutdown()
    cluster.shutdown()


def submit_solution(env: gym.Env[str, str]) -> dict[str, object]:
    env.reset(options={"task_id": RELU})
    root = Path(load("builtin").get(RELU).solutions["cuda"])
    for path in (p for p in root.rglob("*") if p.is_file()):
        _, _, _, _, info = env.step(tool_call("write_file", path=str(path.relative_to(root)), content=path.read_text()))
        assert info["status"] == "ok", info
    return env.step(tool_call("submit"))[4]


def test_the_reference_solution_reaches_its_local_tier_through_ray(gpu_cluster: None, cache_dir: Path) -> None:
    from cudagym.ray_pool import shutdown_pools

    config = EvalConfig(num_checks=3)
    remote = gym.make("CudaKernel-v0", backend="cuda", eval_config=config, evaluator="ray", cache_dir=str(cache_dir))
    local = CudaKernelEnv(backend="cuda", eval_config=config, cache_dir=str(cache_dir))
    try:
        on_ray, here = submit_solution(remote), submit_solution(local)
    finally:
        remote.close()
        local.close()
        # the process's shared pool outlives its envs and its worker holds the cluster's only GPU: the next test's
        # pool could place no worker while it lives
        shutdown_pools()
    assert on_ray["correct"] and here["correct"], (on_ray["result"], here["result"])
    assert on_ray["tier"] == here["tier"] >= 1
    pool = remote.unwrapped._evaluator_factory
    assert pool.specs("cuda")[0].gpus == 1


def test_a_cuda_worker_admits_evaluators_by_the_devices_memory(gpu_cluster: None, cache_dir: Path) -> None:
    # jobs of three tasks at once on one cuda worker: its hosted pool starts evaluators only as the device's free
    # memory admits them (before, each job held an evaluator of its own and sixteen envs ran the GPU out of memory)
    from cudagym.ray_pool import Job, JobStage, RayPool, WorkerSpec
    from cudagym.results import Status
    from cudagym.workspace import Workspace

    config = EvalConfig(num_checks=3)
    jobs = []
    for task_id in ("builtin/scale_bias_tanh", "builtin/silu_clamp", "builtin/affine_gelu_clamp") * 3:
        task = load("builtin").get(task_id)
        workspace = Workspace(task.source_for("cuda"), "instructions")
        root = Path(task.solutions["cuda"])
        for path in (p for p in root.rglob("*") if p.is_file()):
            workspace.write(str(path.relative_to(root)), path.read_text())
        jobs.append(Job(JobStage.SUBMIT, task, "cuda", config, workspace.freeze(), client=f"env-{len(jobs)}"))
        workspace.remove()
    with RayPool(WorkerSpec("cuda", cache_dir=str(cache_dir))) as pool:
        results = [future.result() for future in pool.submit_many(jobs)]
        stats = ray.get(pool.workers.handles[0].actor.stats.remote())
    assert [r.status for r in results] == [Status.OK] * len(jobs), [r.message for r in results]
    assert stats.done == len(jobs) and stats.failed == 0, stats
    assert stats.evaluators.created < len(jobs), stats  # shared by the jobs of a task, not one per job
