"""The machine pool on a real GPU with GPU-sized tasks: evaluators are admitted by device memory, so many environments
on tasks of 1 GiB tensors complete their cycles instead of running the device out of memory.

Run on the device machine: ``python -m pytest -m gpu tests/gpu/test_pool_memory.py``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import gymnasium as gym
import pytest

import cudagym  # noqa: F401  (registers the environment)
from cudagym.backends import query_gpu, resolve_backend
from cudagym.baselines import tool_call
from cudagym.baselines.scripted import solution_files
from cudagym.eval_config import EvalConfig
from cudagym.pool import EvaluationPool, PoolEvaluatorFactory
from cudagym.tasks import load

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

TASKS = ("builtin/scale_bias_tanh", "builtin/silu_clamp", "builtin/affine_gelu_clamp")  # 1 GiB tensors on cuda
ENVS = 8
STAGES = ("compile", "verify", "profile")


def cycle(env: gym.Env, task_id: str) -> dict[str, Any]:
    """One cycle of ``task_id``'s reference solution: each stage's status and message."""
    env.reset(options={"task_id": task_id})
    task = env.unwrapped.task
    for path, content in solution_files(task, "cuda").items():
        env.step(tool_call("write_file", path=path, content=content))
    out: dict[str, Any] = {}
    for stage in STAGES:
        result = env.step(tool_call(stage))[4]["result"]
        out[stage] = result["status"]
        out[f"{stage}_message"] = str(result.get("message", ""))
    return out


def test_8_envs_of_3_large_tasks_complete_a_cycle_without_running_out_of_memory(
    cache_dir: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cudagym.pool")
    backend = resolve_backend("cuda")
    tasks = load("builtin")
    pool = EvaluationPool(backend, cache_dir=cache_dir)
    factory = PoolEvaluatorFactory(pool)
    outcomes: list[dict[str, Any] | BaseException] = [RuntimeError("did not finish")] * ENVS
    barrier = threading.Barrier(ENVS)

    def one(i: int) -> None:
        env = gym.make("CudaKernel-v0", task_set=tasks, backend="cuda", cache_dir=str(cache_dir),
                       eval_config=EvalConfig(), evaluator_factory=factory)  # fmt: skip
        try:
            barrier.wait()
            outcomes[i] = cycle(env, TASKS[i % len(TASKS)])
        except BaseException as exc:  # reported below, with the others
            outcomes[i] = exc
        finally:
            env.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(ENVS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=1800)
        stats = pool.stats()
    finally:
        pool.close()
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    assert not errors, errors[:3]
    text = repr(outcomes) + caplog.text
    assert "OutOfMemory" not in text and "out of memory" not in text, text[-4000:]
    for i, outcome in enumerate(outcomes):
        assert isinstance(outcome, dict)
        assert all(outcome[stage] == "ok" for stage in STAGES), (i, outcome)
    assert stats.failed == 0, stats
    measured = pool.admission.measured if pool.admission is not None else {}
    assert measured, "no evaluator's device memory was measured"
