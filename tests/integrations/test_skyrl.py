"""The SkyRL-gym plug, driven through ``skyrl_gym`` itself: registered on import, made with ``skyrl_gym.make`` as
SkyRL's generator makes it (an OmegaConf ``env_config``, the row's ``extras``), a scripted episode of model turns to a
reward, and the metrics aggregated by SkyRL's own aggregator."""

from __future__ import annotations

import pytest
from cudagym_testing import RELU, relu_solution

skyrl_gym = pytest.importorskip("skyrl_gym")
OmegaConf = pytest.importorskip("omegaconf").OmegaConf

from skyrl_gym.envs.base_text_env import BaseTextEnv  # noqa: E402
from skyrl_gym.metrics import aggregate_for_environment  # noqa: E402

from cudagym.baselines import tool_call  # noqa: E402
from cudagym.evaluator import EvalConfig  # noqa: E402
from cudagym.integrations.skyrl import ENTRY_POINT, SKYRL_ENV_ID, register_skyrl, with_task  # noqa: E402

PROMPT = [
    {"role": "system", "content": "You write fast kernels."},
    {"role": "user", "content": "Make this model faster."},
]


def test_registered_with_skyrl_gym() -> None:
    register_skyrl()  # idempotent
    assert skyrl_gym.registry[SKYRL_ENV_ID].entry_point == ENTRY_POINT


@pytest.mark.slow  # one real evaluation: the solution compiled, verified and timed
def test_a_scripted_episode_of_model_turns_reaches_a_reward(fast_config: EvalConfig) -> None:
    env = skyrl_gym.make(
        SKYRL_ENV_ID,
        env_config={"backend": "cpu", "max_turns": 12, "eval_config": fast_config},
        extras={"task_id": RELU, "reward_spec": {"ground_truth": None}},
    )
    assert isinstance(env, BaseTextEnv) and env.max_turns == 12
    try:
        prompt, info = env.init(PROMPT)
        assert info["task_id"] == RELU and prompt[0] == PROMPT[0] and len(prompt) == 2
        assert prompt[1]["content"].startswith("Make this model faster.\n\n") and "class Model" in prompt[1]["content"]

        output = env.step("Let me read the reference.\n" + tool_call("read_file", path="model.py"))
        assert output["observations"][0]["role"] == "user" and "class Model" in output["observations"][0]["content"]
        assert output["reward"] == 0.0 and not output["done"] and output["metadata"]["tool"] == "read_file"

        output = env.step("I think the answer is to use a kernel.")  # no call: the model is told how to write one
        assert output["metadata"]["status"] == "invalid_call" and not output["done"]
        assert "No tool call found" in output["observations"][0]["content"]

        for path, content in relu_solution().items():
            output = env.step(tool_call("write_file", path=path, content=content))
            assert output["metadata"]["status"] == "ok", output["observations"]
        output = env.step("All files are written; submitting.\n" + tool_call("submit"))
        assert output["done"] and output["observations"] == []
        tier = output["metadata"]["tier"]
        assert tier >= 1 and output["reward"] == float(tier) and "tier" in output["metadata"]["observation"]

        metrics = env.get_metrics()
        assert metrics["submitted"] is True and metrics["tier"] == tier and metrics["correct"] is True
        assert metrics["turns"] == 3 + len(relu_solution())
        unsubmitted = {"turns": 5, "submitted": False}
        averaged = aggregate_for_environment(SKYRL_ENV_ID, [metrics, unsubmitted])
        assert averaged["submitted"] == 0.5 and averaged["tier"] == tier
        assert averaged["turns"] == (metrics["turns"] + 5) / 2
    finally:
        env.close()
        env.close()  # twice is fine


def test_config_from_a_dictconfig_and_the_turn_budget() -> None:
    """SkyRL's Hydra config as it arrives (nested ``eval_config`` included), the task named in ``extra_info``."""
    config = OmegaConf.create({"backend": "cpu", "max_turns": 2, "eval_config": {"num_checks": 2}})
    env = skyrl_gym.make(SKYRL_ENV_ID, env_config=config, extras={"extra_info": {"task_id": RELU}})
    try:
        assert env._env.eval_config.num_checks == 2
        prompt, info = env.init([{"role": "assistant", "content": "Ready."}])
        assert info["task_id"] == RELU and prompt[-1]["role"] == "user" and "class Model" in prompt[-1]["content"]
        assert not env.step(tool_call("list_files"))["done"]
        output = env.step(tool_call("list_files"))
        assert output["done"] and output["observations"] == [] and output["reward"] == 0.0
        assert "turn budget" in output["metadata"]["observation"]
        assert env.get_metrics() == {"turns": 2, "submitted": False}
    finally:
        env.close()
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['checks'\]; EvalConfig takes: num_checks"):
        skyrl_gym.make(SKYRL_ENV_ID, env_config={"eval_config": {"checks": 2}}, extras={})


def test_with_task_keeps_the_prompt() -> None:
    assert with_task([], "TASK") == [{"role": "user", "content": "TASK"}]
    assert with_task([{"role": "user", "content": ""}], "TASK") == [{"role": "user", "content": "TASK"}]
    original = [{"role": "user", "content": "Go."}]
    assert with_task(original, "TASK") == [{"role": "user", "content": "Go.\n\nTASK"}]
    assert original == [{"role": "user", "content": "Go."}]
