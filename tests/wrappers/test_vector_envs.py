"""Vector environments: the spawn-safe id in an AsyncVectorEnv of 4, each sub-environment on its own task,
the right text for every env at every step, SAME_STEP autoreset, and seeding that reproduces the task choice."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import cudagym  # noqa: F401
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.wrappers import ChatMessages

SEED = 10
VECTOR_KWARGS = {"shared_memory": False, "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}


def call(name: str, **arguments: object) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def expected_tasks(fast_config: EvalConfig, seeds: list[int]) -> list[str]:
    """The tasks that in-process environments pick for these seeds."""
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config)
    try:
        return [env.reset(seed=s)[1]["task_id"] for s in seeds]
    finally:
        env.close()


def test_seeding_reproduces_the_task_choice(fast_config: EvalConfig) -> None:
    first = expected_tasks(fast_config, list(range(8)))
    assert first == expected_tasks(fast_config, list(range(8)))
    assert len(set(first)) > 1
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config)
    env.reset(seed=5)
    following = [env.reset()[1]["task_id"] for _ in range(3)]  # unseeded resets continue the seeded generator
    env.reset(seed=5)
    assert [env.reset()[1]["task_id"] for _ in range(3)] == following
    env.close()


def test_async_vector_env_of_four_returns_each_envs_own_text(fast_config: EvalConfig) -> None:
    tasks = expected_tasks(fast_config, [SEED + i for i in range(4)])
    assert len(set(tasks)) == 4, "pick a seed that gives four different tasks"
    envs = gym.make_vec(
        "cudagym:CudaKernel-v0",  # spawn-safe: the worker imports cudagym itself
        num_envs=4,
        vectorization_mode="async",
        vector_kwargs={**VECTOR_KWARGS, "context": "spawn"},
        backend="cpu",
        eval_config=fast_config,
        max_turns=3,
    )
    try:
        observations, infos = envs.reset(seed=SEED)  # sub-environment i is seeded with SEED + i
        assert list(infos["task_id"]) == tasks
        for obs, task in zip(observations, tasks, strict=True):
            assert obs.startswith("# Task: ") and f"({task})" in obs.splitlines()[0]

        observations, rewards, terminated, truncated, infos = envs.step([call("list_files")] * 4)
        assert all(o.startswith("[list_files] OK") and "[turn 1/3]" in o for o in observations)
        assert list(infos["task_id"]) == tasks and not terminated.any() and not truncated.any()

        actions = [call("read_file", path="INSTRUCTIONS.md"), call("read_file", path="model.py")] * 2
        observations, *_, infos = envs.step(actions)
        for i, (obs, task) in enumerate(zip(observations, tasks, strict=True)):
            if i % 2 == 0:
                assert f"({task})" in obs.splitlines()[1]
            else:
                assert "class Model" in obs and "[turn 2/3]" in obs

        observations, rewards, terminated, truncated, infos = envs.step([call("list_files")] * 4)
        assert truncated.all() and not terminated.any() and (rewards == 0).all()
        assert infos["_final_obs"].all()
        assert all("turn budget (3) is spent" in final for final in infos["final_obs"])
        assert all(o.startswith("# Task: ") for o in observations)  # SAME_STEP: already reset
    finally:
        envs.close()


def test_async_vector_env_of_chat_envs(fast_config: EvalConfig) -> None:
    envs = gym.make_vec(
        "cudagym:CudaKernel-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs=VECTOR_KWARGS,
        wrappers=[ChatMessages],
        backend="cpu",
        eval_config=fast_config,
    )
    try:
        observations, _ = envs.reset(seed=[1, 2])
        assert [m[0]["role"] for m in observations] == ["system", "system"]
        entry = {"id": "c", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
        observations, *_ = envs.step({"content": ("", "hi"), "tool_calls": ((entry,), ())})
        assert observations[0][-1]["tool_call_id"] == "c" and "Workspace files" in observations[0][-1]["content"]
        assert observations[1][-1]["role"] == "user" and "No tool call found" in observations[1][-1]["content"]
    finally:
        envs.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_with_plain_id_after_import(mode: str, fast_config: EvalConfig) -> None:
    envs = gym.make_vec(
        "CudaKernel-v0",
        num_envs=2,
        vectorization_mode=mode,
        vector_kwargs=VECTOR_KWARGS if mode == "async" else {"autoreset_mode": VECTOR_KWARGS["autoreset_mode"]},
        backend="cpu",
        eval_config=fast_config,
    )
    _, infos = envs.reset(seed=SEED)
    assert list(infos["task_id"]) == expected_tasks(fast_config, [SEED, SEED + 1])
    envs.close()
