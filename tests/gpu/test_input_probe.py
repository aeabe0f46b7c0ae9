"""The input probe and the memory check on the cuda backend. The probe runs there while the task is prepared ahead: a
copy kernel on ReLU over [0, 1) inputs fails on the signed inputs it adds, the real kernel passes, and a degenerate
task pays at most tier 1 (the CPU counterparts: tests/adversarial/test_degenerate_tasks.py). The memory check reads
the GPU's memory through nvidia-smi.

Run on the device machine: ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from cudagym_testing import RELU_RAND, TINY_RELU, relu_solution, submit_files, with_relu_op

from cudagym.backends import query_gpu
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig, LocalEvaluator
from cudagym.harness.timing import TimingConfig
from cudagym.tasks import TaskSet
from cudagym.tasks.task import with_sizes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

CONFIG = EvalConfig(
    num_checks=3,
    compile_baseline=False,  # tier 3 is out of reach: every tier asserted here lies below it
    timing=TimingConfig(min_reps=10, max_reps=100, budget_seconds=0.5),
)


@pytest.fixture(scope="module")
def env(cache_dir: Path) -> Iterator[CudaKernelEnv]:
    # a cache folder of its own, so that no verdict an earlier test stored spares the probe
    environment = CudaKernelEnv(
        TaskSet("probe", [RELU_RAND, TINY_RELU]), backend="cuda", eval_config=CONFIG, cache_dir=str(cache_dir / "probe")
    )
    yield environment
    environment.close()


def test_the_probe_runs_ahead_and_closes_relu_on_nonnegative_inputs(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU_RAND.id})
    evaluator = env.evaluator
    assert isinstance(evaluator, LocalEvaluator) and evaluator.prepares_ahead and evaluator._ahead is not None
    evaluator._ahead.join(timeout=300)
    assert not evaluator.ahead_error, evaluator.ahead_error
    assert "input_verdict" in evaluator.ahead_marks  # decided while the agent reads the task
    obs, _, info = submit_files(env, RELU_RAND.id, with_relu_op("v", "cuda"))
    assert info["tier"] == -1 and info["input_kinds"] == ["normal", "task"], obs
    obs, _, info = submit_files(env, RELU_RAND.id, relu_solution("cuda"))
    assert info["tier"] >= 1 and info["degenerate"] is False, obs


def test_a_degenerate_task_pays_at_most_tier_one(env: CudaKernelEnv) -> None:
    obs, reward, info = submit_files(env, TINY_RELU.id, with_relu_op("v > 0.0f ? v * 1e-6f : 0.0f", "cuda"))
    assert info["degenerate"] is True and info["tier"] == 1 and reward == 1, obs
    assert info["speedup_eager"] is None and "capped at 1" in obs


def test_reset_compares_the_tensors_with_the_gpu_memory() -> None:
    huge = with_sizes(RELU_RAND, {"batch_size": 1 << 20, "dim": 1 << 16})  # 256 GiB an input
    for task, fits in ((huge, False), (RELU_RAND, True)):
        # nothing prepared ahead: the huge task is never loaded, only estimated
        config = dataclasses.replace(CONFIG, tuning=dataclasses.replace(CONFIG.tuning, prepare_ahead=False))
        env = CudaKernelEnv(TaskSet("sizes", [task]), backend="cuda", eval_config=config)
        try:
            _, info = env.reset()
            warning = info["memory_warning"]
            assert (warning is None) if fits else ("the GPU's memory is" in warning), info
        finally:
            env.close()
