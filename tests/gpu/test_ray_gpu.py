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
    config = EvalConfig(num_checks=3)
    remote = gym.make("CudaKernel-v0", backend="cuda", eval_config=config, evaluator="ray", cache_dir=str(cache_dir))
    local = CudaKernelEnv(backend="cuda", eval_config=config, cache_dir=str(cache_dir))
    try:
        on_ray, here = submit_solution(remote), submit_solution(local)
    finally:
        remote.close()
        local.close()
    assert on_ray["correct"] and here["correct"], (on_ray["result"], here["result"])
    assert on_ray["tier"] == here["tier"] >= 1
    pool = remote.unwrapped._evaluator_factory
    assert pool.specs("cuda")[0].gpus == 1
