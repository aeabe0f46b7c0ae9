"""The scripted agent plays every built-in CPU reference solution through tool-call text to a tier >= 1."""

from __future__ import annotations

import dataclasses

import pytest

from cudagym.baselines import ScriptedAgent, play, solution_files, tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.tasks import load

BUILTIN = load("builtin")
WITH_CPU_SOLUTION = [t.id for t in BUILTIN if "cpu" in t.solutions]


def test_the_builtin_set_has_cpu_reference_solutions() -> None:
    assert len(WITH_CPU_SOLUTION) >= 12


@pytest.fixture(scope="module")
def env(fast_config: EvalConfig):
    # torch.compile baselines are real in the episode and CLI tests; here, one per task would cost minutes of
    # inductor builds on a 2-core CI machine, and tier >= 1 does not need them.
    config = dataclasses.replace(fast_config, compile_baseline=False)
    environment = CudaKernelEnv(backend="cpu", eval_config=config)
    yield environment
    environment.close()


@pytest.mark.parametrize("task_id", WITH_CPU_SOLUTION)
def test_reference_solution_reaches_a_positive_tier(env: CudaKernelEnv, task_id: str) -> None:
    log = play(env, ScriptedAgent(profile=False, verify=False), task_id=task_id)
    assert log.terminated, log
    info = log.final_info
    assert info["tier"] >= 1, f"{task_id}: {info['result']['message']}"
    assert info["correct"] and info["speedup_eager"] is not None and info["speedup_compile"] is None


def test_actions_are_tool_call_text() -> None:
    task = BUILTIN.get("builtin/relu")
    actions = list(ScriptedAgent().actions(task, "cpu"))
    files = solution_files(task, "cpu")
    assert actions[0] == tool_call("read_file", path="model.py")
    assert len(actions) == 1 + len(files) + 4
    assert len(list(ScriptedAgent(profile=False, verify=False).actions(task, "cpu"))) == 1 + len(files) + 2
    assert actions[-1] == tool_call("submit")
    with pytest.raises(KeyError, match="no reference solution for the rocm backend"):
        solution_files(task, "rocm")
