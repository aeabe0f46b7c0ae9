"""Degenerate tasks (catalogue class 11 and its kin): a shortcut that passes on the task's own inputs must not pay.

KernelBench's 19_ReLU draws its inputs from ``torch.rand`` (values in [0, 1)), on which ReLU is the identity: a copy
kernel passed every check and was paid tier 3. The input probe (``cudagym/input_probe.py``) now adds the input kinds
that close such a shortcut (signed normal values here), so the copy fails while the real kernel passes; a task that
no kind closes (its outputs stay below the tolerance whatever the inputs) is marked degenerate and capped at tier 1.
The tasks are KernelBench-shaped, so no KernelBench copy is needed, at the built-in ReLU's cpu size (6.3 M elements,
large enough for the kernel's own time to dominate a call); ``torch.compile`` is not timed (tier 3 is out of reach,
and every tier asserted here lies below it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from cudagym_testing import RELU_RAND, TINY_RELU, relu_solution, submit_files, with_relu_op

from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.tasks import TaskSet


@pytest.fixture(scope="module")
def env(fast_config: EvalConfig) -> Iterator[CudaKernelEnv]:
    config = dataclasses.replace(fast_config, compile_baseline=False)
    environment = CudaKernelEnv(TaskSet("probe", [RELU_RAND, TINY_RELU]), backend="cpu", eval_config=config)
    yield environment
    environment.close()


def test_a_copy_kernel_no_longer_passes_relu_on_nonnegative_inputs(env: CudaKernelEnv) -> None:
    obs, _, info = submit_files(env, RELU_RAND.id, with_relu_op("v"))
    assert info["tier"] < 2 and info["tier"] == -1, obs
    assert info["degenerate"] is False and info["input_kinds"][0] == "normal", info["input_kinds"]
    assert "signed normal inputs" in obs, obs  # the failing check names the input kind it drew
    # the verdict is stored: the next reset knows it and tells the agent
    obs, info = env.reset(options={"task_id": RELU_RAND.id})
    assert info["input_kinds"] == ["normal", "task"] and info["degenerate"] is False
    assert obs.startswith("Note: verification also draws signed normal inputs"), obs[:300]


def test_the_real_relu_kernel_still_passes(env: CudaKernelEnv) -> None:
    obs, _, info = submit_files(env, RELU_RAND.id, relu_solution())
    assert info["tier"] >= 1 and info["correct"], obs
    assert info["degenerate"] is False and "normal" in info["input_kinds"]
    assert "inputs: normal, task" in info["result"]["verify"]["message"]


def test_a_degenerate_task_caps_the_tier_at_one(env: CudaKernelEnv) -> None:
    obs, reward, info = submit_files(env, TINY_RELU.id, with_relu_op("v > 0.0f ? v * 1e-6f : 0.0f"))
    assert info["degenerate"] is True and info["tier"] == 1 and reward == 1 and info["correct"], obs
    assert info["speedup_eager"] is None and info["speedup_compile"] is None  # speed proves nothing here
    assert info["result"]["profile"]["speedup_eager"] is not None  # ... though the profile measured it
    assert "DEGENERATE: zeros pass" in obs and "capped at 1" in obs, obs
    obs, info = env.reset(options={"task_id": TINY_RELU.id})
    assert info["degenerate"] is True and obs.startswith("Note: this task is degenerate"), obs[:300]
