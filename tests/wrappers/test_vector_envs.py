"""Vector environments: the spawn-safe id in an AsyncVectorEnv of 4, each sub-environment on its own task,
the right text for every env at every step, SAME_STEP autoreset, seeding that reproduces the task choice, and
``make_vec`` with its default arguments (shared memory in async mode) giving each env's own text."""

from __future__ import annotations

import copy
import json
import pickle

import gymnasium as gym
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

import cudagym  # noqa: F401
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.text_space import PrintableText, SharedTextBatch
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


def test_shared_memory_texts_are_read_live() -> None:
    """Gymnasium's own Text reader copies the buffer once (the '000...' observations); PrintableText's reads it
    whenever asked, and its copies are plain tuples of the texts of that moment."""
    plain = spaces.Text(max_length=8, min_length=0, charset="0ab")
    buffer = create_shared_memory(plain, n=2)
    stale = read_from_shared_memory(plain, buffer, n=2)
    write_to_shared_memory(plain, 0, "ab", buffer)
    assert stale == ("00000000", "00000000")  # what the default async make_vec returned before

    space = PrintableText(8)
    buffer = create_shared_memory(space, n=2)
    view = read_from_shared_memory(space, buffer, n=2)
    assert isinstance(view, SharedTextBatch)
    write_to_shared_memory(space, 0, "def f()", buffer)
    write_to_shared_memory(space, 1, "x = 1\n", buffer)
    assert view == ("def f()", "x = 1\n") and len(view) == 2 and view[1:] == ("x = 1\n",)
    snapshot = copy.deepcopy(view)
    assert type(snapshot) is tuple and type(copy.copy(view)) is tuple and pickle.loads(pickle.dumps(view)) == snapshot
    write_to_shared_memory(space, 0, "", buffer)
    assert list(view) == ["", "x = 1\n"] and snapshot == ("def f()", "x = 1\n")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_with_default_arguments_gives_each_envs_text(mode: str, fast_config: EvalConfig) -> None:
    tasks = expected_tasks(fast_config, [SEED, SEED + 1])
    envs = gym.make_vec("CudaKernel-v0", num_envs=2, vectorization_mode=mode, backend="cpu", eval_config=fast_config)
    try:
        if mode == "async":
            assert envs.unwrapped.shared_memory  # the default, which returned '000...' texts before
        observations, infos = envs.reset(seed=SEED)
        assert type(observations) is tuple and list(infos["task_id"]) == tasks
        for obs, task in zip(observations, tasks, strict=True):
            assert obs.startswith("# Task: ") and f"({task})" in obs.splitlines()[0]
        observations, *_ = envs.step([call("read_file", path="model.py"), call("list_files")])
        assert "class Model" in observations[0] and "[turn 1/200]" in observations[0]
        assert observations[1].startswith("[list_files] OK")
        observations, *_ = envs.step([call("list_files"), call("read_file", path="model.py")])
        assert observations[0].startswith("[list_files] OK") and "class Model" in observations[1]
    finally:
        envs.close()
