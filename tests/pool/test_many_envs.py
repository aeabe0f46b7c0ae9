"""Many environments on one machine pool, as threads of this process and through ``cudagym pool``'s socket.

16 environments (``gym.make`` with a pool factory) compile, verify and some submit, half of them a wrong solution: each
gets its own verdict, and the task's evaluators stay within the pool's bound however many sessions use it. Through the
socket, environments made with ``service_socket=`` (the service's unchanged client) are served by the pool's
evaluators.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from cudagym_testing import RELU, relu_solution
from pool_testing import CPU, MachinePool

import cudagym  # noqa: F401  (registers the environment)
from cudagym.backends import Backend, resolve_backend
from cudagym.baselines import tool_call
from cudagym.eval_config import EvalConfig
from cudagym.pool import PoolEvaluatorFactory, PoolLimits, evaluators
from cudagym.pool.server import PoolServer, add_pool_command, limits_from
from cudagym.service import ServiceEvaluator
from cudagym.tasks import Task

ENVS = 16


def wrong_relu() -> dict[str, str]:
    files = relu_solution()
    files["kernels/relu.cpp"] = files["kernels/relu.cpp"].replace("y[i] = v > 0.0f ? v : 0.0f;", "y[i] = v;")
    return files


def episode(env: gym.Env, files: dict[str, str], submit: bool) -> dict[str, Any]:
    """Writes ``files`` and compiles, verifies (and submits); the statuses and the submit's tier."""
    env.reset(options={"task_id": RELU})
    for path, content in files.items():
        env.step(tool_call("write_file", path=path, content=content))
    out = {stage: env.step(tool_call(stage))[4]["result"]["status"] for stage in ("compile", "verify")}
    if submit:
        out["tier"] = env.step(tool_call("submit"))[4]["tier"]
    return out


def run_envs(make_env: Any, count: int) -> list[dict[str, Any] | BaseException]:
    """``count`` environments on threads released together; each one's episode, or what it raised."""
    barrier = threading.Barrier(count)
    outcomes: list[dict[str, Any] | BaseException] = [RuntimeError("did not finish")] * count

    def one(i: int) -> None:
        env = make_env()
        try:
            barrier.wait()
            outcomes[i] = episode(env, wrong_relu() if i % 2 else relu_solution(), submit=i % 6 == 0)
        except BaseException as exc:  # reported below, with the others
            outcomes[i] = exc
        finally:
            env.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return outcomes


def test_16_envs_on_one_pool_get_their_own_verdicts(
    machine: MachinePool, small_relu: Task, pool_config: EvalConfig
) -> None:
    before, failed = len(machine.made), machine.pool.stats().failed
    factory = PoolEvaluatorFactory(machine.pool)

    def make() -> gym.Env:
        return gym.make("CudaKernel-v0", task_set=[small_relu], backend="cpu", eval_config=pool_config,
                        evaluator_factory=factory)  # fmt: skip

    outcomes = run_envs(make, ENVS)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert not errors, errors[:3]
    for i, outcome in enumerate(outcomes):
        assert isinstance(outcome, dict)
        assert outcome["compile"] == "ok", (i, outcome)
        assert outcome["verify"] == ("mismatch" if i % 2 else "ok"), (i, outcome)
        if "tier" in outcome:
            assert outcome["tier"] >= 1, (i, outcome)  # the submitters are the even envs: right solutions
    assert len(machine.made) - before <= machine.pool.limits.max_per_task, "more evaluators than the bound for a task"
    assert machine.pool.stats().failed == failed and machine.pool.stats().queued == 0


@pytest.fixture
def pool_server(machine: MachinePool) -> Iterator[PoolServer]:
    folder = Path(tempfile.mkdtemp(prefix="cg-pool-", dir="/tmp"))  # AF_UNIX paths must stay short
    server = PoolServer(folder / "eval.sock", CPU, cache_dir=machine.pool.cache_dir, pool=machine.pool)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_envs_reach_the_pool_through_the_services_socket(
    pool_server: PoolServer, machine: MachinePool, small_relu: Task, pool_config: EvalConfig
) -> None:
    def make() -> gym.Env:
        return gym.make("CudaKernel-v0", task_set=[small_relu], backend="cpu", eval_config=pool_config,
                        service_socket=str(pool_server.socket_path))  # fmt: skip

    warm = gym.make("CudaKernel-v0", task_set=[small_relu], backend="cpu", eval_config=pool_config,
                    evaluator_factory=PoolEvaluatorFactory(machine.pool))  # fmt: skip
    assert episode(warm, relu_solution(), submit=False)["verify"] == "ok"  # the task has an idle evaluator now
    warm.close()
    before = len(machine.made)
    env = make()
    try:
        assert episode(env, relu_solution(), submit=False)["verify"] == "ok"
        assert isinstance(env.unwrapped.evaluator, ServiceEvaluator)
    finally:
        env.close()
    assert len(machine.made) == before, "a session through the socket did not use the task's idle evaluator"
    outcomes = run_envs(make, 4)
    assert [o["verify"] if isinstance(o, dict) else o for o in outcomes] == ["ok", "mismatch", "ok", "mismatch"]
    assert outcomes[0]["tier"] >= 1  # type: ignore[index]
    stats = pool_server.info().pool
    assert stats is not None and stats["done"] >= 10 and stats["evaluators"]["keys"] >= 1


def test_the_pool_command_reads_its_bounds() -> None:
    parser = argparse.ArgumentParser()
    add_pool_command(parser.add_subparsers())
    args = parser.parse_args(["pool", "--backend", "cpu", "--max-evaluators", "5", "--memory-gb", "2"])
    cpu = resolve_backend("cpu")
    limits = limits_from(args, cpu)
    assert (limits.max_evaluators, limits.memory_bytes, limits.max_per_task) == (5, 2 << 30, 5)
    assert dataclasses.asdict(limits_from(parser.parse_args(["pool"]), cpu)) == dataclasses.asdict(type(limits)())


def test_on_cuda_the_pool_keeps_no_more_evaluators_than_the_device_has_memory_slots(monkeypatch) -> None:
    # each evaluator keeps a reference process with the task on the device: one per memory slot (20 GiB) at most
    monkeypatch.setattr(evaluators, "auto_slots", lambda backend: 3)
    cuda = Backend("cuda", "cuda:0", "a GPU", "sm_90")
    assert PoolLimits.for_backend(cuda).max_evaluators == min(3, evaluators.default_max_evaluators())
    assert PoolLimits.for_backend(cuda, max_evaluators=9).max_evaluators == 9  # what the user sets stands
    assert PoolLimits.for_backend(resolve_backend("cpu")) == PoolLimits()
