"""One pool for the whole cluster (``cudagym.ray_pool.cluster_pool``): envs in another process and in this one send
their jobs to the same named service and its one worker; the service outlives the process that started it; a service
lost mid-job answers with a harness error, never an exception, and the next job starts a new one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_pool import relu_job

from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.ray_pool import ClusterPool, JobStage, RayEvaluatorFactory, WorkerSpec, stop_cluster_pool
from cudagym.ray_pool.cluster_pool import NAMESPACE, service_name
from cudagym.results import Status

ray = pytest.importorskip("ray")

NAME = "tests"
LABEL = "node_shared"  # the node the shared pool's one worker is pinned to (the package's pool keeps the others busy)

# another process of the cluster: an env whose factory names the cluster pool plays the ReLU solution to a verify
OTHER_PROCESS = """
import json, sys
from pathlib import Path
from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.ray_pool import RayEvaluatorFactory, WorkerSpec
from cudagym.tasks import load

address, cache, name, label = sys.argv[1:5]
spec = WorkerSpec("cpu", resources={label: 1}, cache_dir=cache)
factory = RayEvaluatorFactory(address=address, workers=(spec,), cluster_pool=name, placement_timeout_s=120)
env = CudaKernelEnv(backend="cpu", eval_config=EvalConfig(num_checks=3, verify_timeout=60), evaluator_factory=factory)
env.reset(options={"task_id": "builtin/relu"})
root = Path(load("builtin").get("builtin/relu").solutions["cpu"])
for path in (p for p in root.rglob("*") if p.is_file()):
    env.step(tool_call("write_file", path=str(path.relative_to(root)), content=path.read_text()))
info = env.step(tool_call("verify"))[4]
env.close()
print(json.dumps({"status": info["status"], "message": info["result"]["message"]}))
"""


@pytest.fixture(scope="module")
def worker_spec(ray_cluster: Any, cache_dir: Path) -> Iterator[WorkerSpec]:
    """One cpu worker on a node of its own, which the shared pool's tests use; the pool is stopped at the end."""
    ray_cluster.add(LABEL)
    yield WorkerSpec("cpu", resources={LABEL: 1}, cache_dir=str(cache_dir))
    stop_cluster_pool(NAME, "cpu")
    ray_cluster.cluster.remove_node(ray_cluster.nodes.pop(LABEL))


def test_envs_of_two_processes_share_the_clusters_pool(
    ray_cluster: Any, worker_spec: WorkerSpec, cache_dir: Path, fast_config: EvalConfig
) -> None:
    other = subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, ray_cluster.cluster.address, str(cache_dir), NAME, LABEL],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.returncode == 0, other.stderr[-3000:]
    verdict = json.loads(other.stdout.strip().splitlines()[-1])
    assert verdict["status"] == "ok", verdict
    # that process has ended; the service it started serves this one, on the same worker
    ray.get_actor(service_name(NAME, "cpu"), namespace=NAMESPACE)
    here = ClusterPool(NAME, "cpu", [worker_spec])
    result = here.run(relu_job(fast_config, JobStage.VERIFY, client="this-process"))
    assert result.status is Status.OK, result.message
    stats = here.stats()
    assert stats.done >= 2 and stats.workers == 1 and stats.failed == 0, stats


def test_a_service_lost_mid_job_is_a_harness_error_and_the_next_job_starts_a_new_one(
    worker_spec: WorkerSpec, fast_config: EvalConfig
) -> None:
    pool = ClusterPool(NAME, "cpu", [worker_spec], placement_timeout_s=120)
    ray.get(pool._handle().stats.remote(), timeout=60)  # the service is up (started here, or left by the test before)
    pending = pool.submit(relu_job(fast_config, JobStage.VERIFY, client="lost"))
    ray.kill(ray.get_actor(service_name(NAME, "cpu"), namespace=NAMESPACE))
    lost = pending.result(timeout=120)
    assert lost.status is Status.HARNESS_ERROR and "evaluation pool failed" in lost.message, lost.message
    start = time.monotonic()
    while released(service_name(NAME, "cpu")) is False and time.monotonic() - start < 30:
        time.sleep(0.1)  # Ray frees the dead service's name a moment after its death (a job before that fails too)
    again = pool.run(relu_job(fast_config, JobStage.VERIFY, client="after"))
    assert again.status is Status.OK, again.message
    assert pool.stats().done == 1  # a new service: the lost one's count went with it
    assert time.monotonic() - start < 180


def released(name: str) -> bool:
    """Whether no actor holds ``name`` in the cluster pools' namespace."""
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return True
    return False


def test_an_env_option_names_the_cluster_pool(cache_dir: Path) -> None:
    # what a trainer's YAML gives (plain values): the env's factory sends its jobs to the named pool
    env = CudaKernelEnv(backend="cpu", evaluator="ray", ray_pool="train", cache_dir=str(cache_dir))
    try:
        assert env._evaluator_factory == RayEvaluatorFactory(cache_dir=str(cache_dir), cluster_pool="train")
    finally:
        env.close()


def test_a_factory_names_its_cluster_pool_and_stays_hashable() -> None:
    # the factory keys the process's pools: pinned workers (a dict of resources) included
    pinned = (WorkerSpec("cpu", resources={LABEL: 1}),)
    factory = RayEvaluatorFactory(workers=pinned, cluster_pool="trainer-a")
    assert hash(factory) == hash(
        RayEvaluatorFactory(workers=(WorkerSpec("cpu", resources={LABEL: 1}),), cluster_pool="trainer-a")
    )
    assert factory != RayEvaluatorFactory(
        workers=(WorkerSpec("cpu", resources={"elsewhere": 1}),), cluster_pool="trainer-a"
    )
    assert factory != RayEvaluatorFactory()  # a pool of the process's own is another pool
    with pytest.raises(ValueError, match="non-empty name"):
        RayEvaluatorFactory(cluster_pool="")
    with pytest.raises(ValueError, match="needs a name"):
        ClusterPool("", "cpu", [WorkerSpec("cpu")])
    with pytest.raises(ValueError, match="at least one worker"):
        ClusterPool("empty", "cpu", [WorkerSpec("cpu", count=0)])
