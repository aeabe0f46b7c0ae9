"""The agent protocol, the scripted agent behind it, and agents by name."""

from __future__ import annotations

import pytest

from cudagym.baselines import ScriptedAgent, solution_files, tool_call
from cudagym.baselines.agents import (
    Agent,
    ScriptedPlayer,
    agent_names,
    make_agent,
    register_agent,
    split_first_observation,
)
from cudagym.baselines.llm_agent import LLMAgent
from cudagym.baselines.random_agent import RandomAgent
from cudagym.tasks import Task, load

RELU = load("builtin").get("builtin/relu")


def play_script(player: ScriptedPlayer, task: Task) -> list[str]:
    player.reset(task, "cpu", "obs")
    actions = []
    while (action := player.act("obs")) is not None:
        actions.append(action)
    return actions


def test_scripted_player_replays_the_scripted_agent() -> None:
    player = ScriptedPlayer()
    assert isinstance(player, Agent) and player.name == "scripted"
    assert play_script(player, RELU) == list(ScriptedAgent().actions(RELU, "cpu"))
    assert player.episode_stats() == {"stop_reason": "the script is finished"}
    no_checks = play_script(ScriptedPlayer(checks=False), RELU)
    assert no_checks == [tool_call("read_file", path="model.py")] + [
        tool_call("write_file", path=p, content=c) for p, c in solution_files(RELU, "cpu").items()
    ] + [tool_call("submit")]
    assert play_script(ScriptedPlayer(), RELU) == play_script(ScriptedPlayer(), RELU)  # a fresh script per reset


def test_scripted_player_without_a_solution_stops_and_says_why() -> None:
    bare = Task("custom/bare", "bare", "source")
    player = ScriptedPlayer()
    assert play_script(player, bare) == []
    assert "no reference solution for the cpu backend" in player.episode_stats()["stop_reason"]


def test_agents_by_name() -> None:
    assert {"scripted", "random", "llm"} <= set(agent_names())
    assert isinstance(make_agent("scripted", profile=False), ScriptedPlayer)
    assert isinstance(make_agent("random", seed=3), RandomAgent)
    llm = make_agent("llm", model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert isinstance(llm, LLMAgent) and isinstance(llm, Agent)
    llm.close()
    with pytest.raises(KeyError, match="no agent named 'nope'"):
        make_agent("nope")
    register_agent("test-only", lambda **o: ScriptedPlayer(**o))
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_agent("test-only", ScriptedPlayer)
        assert isinstance(make_agent("test-only", checks=False), ScriptedPlayer)
    finally:
        from cudagym.baselines import agents

        agents._AGENTS.pop("test-only")


def test_first_observation_splits_into_instructions_and_task() -> None:
    assert split_first_observation("# Task\nrules\n\n## model.py\nimport torch\n") == (
        "# Task\nrules",
        "## model.py\nimport torch\n",
    )
    assert split_first_observation("no heading") == ("", "no heading")
