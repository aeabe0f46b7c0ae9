"""The random agent fuzzes the environment: every action yields an observation in the observation space."""

from __future__ import annotations

import collections
import math

import pytest

from cudagym.baselines.agents import Agent
from cudagym.baselines.random_agent import CHEAP_TOOL_WEIGHTS, PATHS, RandomAgent
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.tasks import load
from cudagym.tools import ParseFailure, parse_action

RELU = load("builtin").get("builtin/relu")
OVERLONG = [p for p in PATHS if len(p) > 255]
FUZZ_STEPS = 150


def actions(agent: RandomAgent, n: int) -> list[str]:
    agent.reset(RELU, "cpu", "obs")
    return [a for _ in range(n) if (a := agent.act("obs")) is not None]


def test_actions_are_seeded_and_varied() -> None:
    first = actions(RandomAgent(7), 200)
    assert first == actions(RandomAgent(7), 200)
    assert first != actions(RandomAgent(8), 200)
    agent = RandomAgent(7)
    assert actions(agent, 50) == first[:50] and actions(agent, 50) != first[:50]  # the 2nd episode differs
    parsed = [parse_action(a) for a in first]
    problems = collections.Counter(p.problem for p in parsed if isinstance(p, ParseFailure))
    tools = collections.Counter(p.tool_name() for p in parsed if not isinstance(p, ParseFailure))
    assert len(problems) >= 4 and len(tools) >= 6, (problems, tools)
    assert isinstance(RandomAgent(), Agent)
    assert len(actions(RandomAgent(max_actions=3), 10)) == 3
    with pytest.raises(ValueError):
        RandomAgent(tool_weights={"bash": 1.0})


@pytest.fixture(scope="module")
def fuzz_env(fast_config: EvalConfig):
    environment = CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=30)
    yield environment
    environment.close()


def test_fuzzing_never_raises_and_observations_are_in_the_space(fuzz_env: CudaKernelEnv) -> None:
    statuses: collections.Counter[str] = collections.Counter()
    steps = episodes = 0
    while steps < FUZZ_STEPS:
        agent = RandomAgent(episodes, tool_weights=CHEAP_TOOL_WEIGHTS, submit_probability=0.04, paths=PATHS)
        obs, _ = fuzz_env.reset(options={"task_id": RELU.id})
        agent.reset(RELU, "cpu", obs)
        episodes += 1
        terminated = truncated = False
        while not (terminated or truncated) and steps < FUZZ_STEPS:
            obs, reward, terminated, truncated, info = fuzz_env.step(agent.act(obs))
            steps += 1
            assert fuzz_env.observation_space.contains(obs), repr(obs[:200])
            assert math.isfinite(reward) and "status" in info
            statuses[info["status"]] += 1
    assert {"ok", "invalid_call", "file_error"} <= set(statuses), statuses
    assert episodes >= 3


def test_an_overlong_path_is_a_file_error(fuzz_env: CudaKernelEnv) -> None:
    fuzz_env.reset(options={"task_id": RELU.id})
    for tool in ("read_file", "write_file", "edit_file"):
        agent = RandomAgent(0, malformed=0.0, submit_probability=0.0, tool_weights={tool: 1.0}, paths=OVERLONG)
        agent.reset(RELU, "cpu", "")
        obs, _, _, _, info = fuzz_env.step(agent.act(""))
        assert info["status"] == "file_error" and fuzz_env.observation_space.contains(obs)
