"""CudaKernelTAEnv: registered with TextArena on import, deep-copyable before and after use, invalid moves
on demand, and one real episode through TextArena's own API (``ta.make`` ... ``close()``) to a reward."""

from __future__ import annotations

import copy
import random
import sys

import pytest
from cudagym_testing import RELU, relu_solution

ta = pytest.importorskip("textarena")

from cudagym.baselines import tool_call  # noqa: E402
from cudagym.envs.textarena_env import TA_ENV_ID, CudaKernelTAEnv, register_textarena  # noqa: E402
from cudagym.evaluator import EvalConfig  # noqa: E402


def test_optional_extras_are_imported_lazily() -> None:
    import subprocess

    code = (
        "import sys, cudagym.envs as e\n"
        "assert 'textarena' not in sys.modules and 'pettingzoo' not in sys.modules\n"
        "assert e.CudaKernelTAEnv.__name__ == 'CudaKernelTAEnv' and 'textarena' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_registered_with_textarena() -> None:
    register_textarena()  # idempotent
    registry = ta.envs.registration.ENV_REGISTRY
    assert registry[TA_ENV_ID].entry_point == "cudagym.envs.textarena_env:CudaKernelTAEnv"
    assert registry[TA_ENV_ID].default_wrappers == [ta.wrappers.LLMObservationWrapper]
    assert f"{TA_ENV_ID}-raw" in registry and not registry[f"{TA_ENV_ID}-raw"].default_wrappers


def test_deep_copies_are_fresh_games(fast_config: EvalConfig) -> None:
    template = ta.make(TA_ENV_ID, backend="cpu", eval_config=fast_config, max_turns=5)
    assert isinstance(template, ta.wrappers.LLMObservationWrapper)
    assert template.env.gym_env is None  # nothing opened before the first reset
    game = copy.deepcopy(template)
    state = random.getstate()
    game.reset(num_players=1, seed=3)
    assert random.getstate() == state  # TextArena's State would have reseeded the global generator
    workspace = game.env.gym_env.workspace.path
    player, observation = game.get_observation()
    assert player == 0 and observation.startswith("\n[GAME] # Task: ")
    done, info = game.step(tool_call("list_files"))
    assert not done and info["status"] == "ok" and info["reward"] == 0
    again = copy.deepcopy(game.env)
    assert isinstance(again, CudaKernelTAEnv) and again.gym_env is None and again.env_kwargs["max_turns"] == 5
    assert again.env_id == TA_ENV_ID
    game.close()
    assert game.env.gym_env is None and not workspace.exists()


def test_malformed_calls_are_observations_or_invalid_moves(fast_config: EvalConfig) -> None:
    game = ta.make(f"{TA_ENV_ID}-raw", backend="cpu", eval_config=fast_config, max_turns=4, task_id=RELU)
    game.reset(num_players=1)
    game.get_observation()
    done, info = game.step("no tool call here")
    assert not done and info["status"] == "invalid_call"
    _, messages = game.get_observation()
    assert [m[2] for m in messages] == [ta.ObservationType.PLAYER_ACTION, ta.ObservationType.GAME_MESSAGE]
    assert "No tool call found" in messages[1][1]
    game.close()

    strict = ta.make(f"{TA_ENV_ID}-raw", backend="cpu", eval_config=fast_config, task_id=RELU, error_allowance=1)
    strict.reset(num_players=1)
    done, _ = strict.step("nonsense")  # forgiven once
    _, messages = strict.get_observation()
    assert not done and messages[-1][2] == ta.ObservationType.GAME_ADMIN and "invalid move" in messages[-1][1]
    done, _ = strict.step("more nonsense")
    rewards, game_info = strict.close()
    assert done and rewards == {0: -1.0} and game_info[0]["invalid_move"]


def test_turn_budget_ends_the_game_with_the_return(fast_config: EvalConfig) -> None:
    game = ta.make(TA_ENV_ID, backend="cpu", eval_config=fast_config, max_turns=2, task_id=RELU)
    game.reset(num_players=1, seed=0)
    assert game.step(tool_call("list_files"))[0] is False
    done, info = game.step(tool_call("read_file", path="model.py"))
    assert game.step(tool_call("submit"))[0] is True  # too late: the outcome stands
    rewards, game_info = game.close()
    assert done and info["turn"] == 2 and rewards == {0: 0.0}
    assert game_info[0]["reason"].startswith("The turn budget is spent")


def test_an_episode_through_textarenas_api_reaches_a_reward(fast_config: EvalConfig) -> None:
    """One real evaluation: the reference solution, played by a TextArena-style agent (observation -> text)."""
    actions = iter(
        [tool_call("read_file", path="model.py")]
        + [tool_call("write_file", path=p, content=c) for p, c in relu_solution().items()]
        + [tool_call("submit")]
    )
    env = ta.make(TA_ENV_ID, backend="cpu", eval_config=fast_config, max_turns=20, task_id=RELU)
    env.reset(num_players=1, seed=0)
    done, steps = False, 0
    while not done:
        player_id, observation = env.get_observation()
        assert player_id == 0 and isinstance(observation, str)
        done, step_info = env.step(action=next(actions))
        steps += 1
    rewards, game_info = env.close()
    assert step_info["tool"] == "submit" and step_info["tier"] >= 1
    assert rewards == {0: float(step_info["tier"])}
    assert game_info[0]["turn_count"] == steps and game_info[0]["reason"].startswith("Submitted: tier")
