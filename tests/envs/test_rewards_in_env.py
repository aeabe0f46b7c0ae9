"""Reward shapers plugged into the env: a custom callable, a registered name, and the built-in default."""

from __future__ import annotations

import gymnasium as gym
from cudagym_testing import RELU, relu_solution

import cudagym  # noqa: F401
from cudagym.baselines import tool_call
from cudagym.evaluator import EvalConfig
from cudagym.reward_shaping import FunctionShaper, Reward, StepRecord, register_reward
from cudagym.reward_shaping.registry import _FACTORIES


def play_relu(env: gym.Env) -> list[tuple[float, dict]]:
    env.reset(options={"task_id": RELU})
    steps = []
    for path, content in relu_solution().items():
        _, reward, _, _, info = env.step(tool_call("write_file", path=path, content=content))
        steps.append((reward, info))
    for name in ("compile", "verify", "submit"):
        _, reward, terminated, _, info = env.step(tool_call(name))
        steps.append((reward, info))
    assert terminated
    return steps


def test_custom_callable_shapes_every_step(fast_config: EvalConfig) -> None:
    seen: list[tuple[int, str, int]] = []

    def per_step(step: StepRecord, history) -> Reward:
        seen.append((step.turn, step.tool, len(history)))
        bonus = 10.0 if step.tool == "submit" and step.result.tier >= 1 else 0.0
        return Reward(bonus - 0.01, {"turn_cost": -0.01, "bonus": bonus})

    env = gym.make("CudaKernel-v0", backend="cpu", eval_config=fast_config, reward=per_step)
    steps = play_relu(env)
    env.close()
    assert [s[0] for s in seen] == list(range(1, len(steps) + 1))
    assert [s[2] for s in seen] == list(range(len(steps)))
    assert [r for r, _ in steps[:-1]] == [-0.01] * (len(steps) - 1)
    assert steps[-1][0] == 9.99
    assert steps[-1][1]["reward_terms"] == {"turn_cost": -0.01, "bonus": 10.0}


def test_registered_reward_by_name(fast_config: EvalConfig) -> None:
    def factory(scale: float = 1.0):
        return FunctionShaper(
            lambda step, history: scale * (step.result.tier if step.terminated else 0.0), name="scaled_tier"
        )

    register_reward("scaled_tier_test", factory, overwrite=True)
    try:
        env = gym.make(
            "CudaKernel-v0",
            backend="cpu",
            eval_config=fast_config,
            reward="scaled_tier_test",
            reward_options={"scale": 0.5},
        )
        steps = play_relu(env)
        env.close()
    finally:
        _FACTORIES.pop("scaled_tier_test", None)
    tier = steps[-1][1]["tier"]
    assert tier >= 1 and steps[-1][0] == 0.5 * tier
    assert all(r == 0 for r, _ in steps[:-1])
