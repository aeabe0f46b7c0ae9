"""The verl plug, driven through verl's own code: the tool config loaded by verl's ``initialize_tools_from_config``,
the ``BaseTool`` lifecycle (create, execute, calc_reward, release) through a scripted compile, verify and submit, and
tool calls run by verl's ``ToolAgentLoop._call_tool`` (a create/execute/release per call, with the trajectory's real
``AgentData``), whose recorded rewards verl's reward function then sums."""

from __future__ import annotations

import asyncio
import gc
import json
import types
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import RELU, relu_solution

pytest.importorskip("verl")
pytest.importorskip("yaml")

from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.schemas import OpenAIFunctionToolSchema
from verl.tools.tool_registry import initialize_tools_from_config

from cudagym.integrations.verl import (
    EPISODES,
    TOOL_CLASS,
    CudaKernelTool,
    compute_score,
    make_rows,
    tool_config,
    tools_kwargs,
    write_tool_config,
)
from cudagym.tools import TOOLS, tool_schemas

# the fast evaluation of tests/conftest.py as a tool config can hold it (plain values; torch.compile baseline off)
FAST_EVAL = {
    "num_checks": 3,
    "verify_timeout": 60,
    "profile_timeout": 120,
    "compile_baseline": False,
    "timing": {"warmup": 2, "warmup_seconds": 0.02, "min_reps": 5, "max_reps": 50, "budget_seconds": 0.2},
}


def load_tools(tmp_path: Path, **env_options: Any) -> dict[str, CudaKernelTool]:
    """The eight tools as verl instantiates them from a tool config file."""
    path = write_tool_config(tmp_path / "cudagym_tools.yaml", backend="cpu", eval_config=FAST_EVAL, **env_options)
    tools = initialize_tools_from_config(str(path))
    return {tool.name: tool for tool in tools}


def test_verl_loads_the_tool_config(tmp_path: Path) -> None:
    tools = load_tools(tmp_path, max_turns=10)
    assert list(tools) == [t.tool_name() for t in TOOLS]
    for tool, schema in zip(tools.values(), tool_schemas("openai"), strict=True):
        assert isinstance(tool, CudaKernelTool)
        assert tool.tool_schema == OpenAIFunctionToolSchema.model_validate(schema)
        assert tool.config == {"type": "native", "env": {"backend": "cpu", "eval_config": FAST_EVAL, "max_turns": 10}}
    assert {entry["class_name"] for entry in tool_config()["tools"]} == {TOOL_CLASS}
    # without a schema in the config, the tool's own is taken; a name cudagym has no tool for is refused
    assert CudaKernelTool({"type": "native", "tool": "verify"}).tool_schema.function.name == "verify"
    with pytest.raises(ValueError, match="no cudagym tool 'run_tests'; the tools are: write_file"):
        CudaKernelTool({"type": "native", "tool": "run_tests"})


@pytest.mark.slow  # one real evaluation: the solution compiled, verified and timed
def test_the_tool_lifecycle_through_compile_verify_and_submit(tmp_path: Path) -> None:
    tools = load_tools(tmp_path, max_turns=20)

    async def episode() -> list[tuple[str, float, dict[str, Any]]]:
        for tool in tools.values():  # one trajectory: the same instance id for every tool
            instance_id, response = await tool.create("trajectory-1", create_kwargs={"task_id": RELU})
            assert instance_id == "trajectory-1" and response.is_empty()
        steps = []
        calls = [("write_file", {"path": p, "content": c}) for p, c in relu_solution().items()]
        calls += [("compile", {}), ("verify", {}), ("submit", {}), ("list_files", {})]
        for name, arguments in calls:
            response, reward, metrics = await tools[name].execute("trajectory-1", arguments)
            steps.append((response.text, reward, metrics))
        assert await tools["compile"].calc_reward("trajectory-1") == sum(reward for _, reward, _ in steps)
        for tool in tools.values():
            await tool.release("trajectory-1")
        return steps

    steps = asyncio.run(episode())
    *writes, compiled, verified, submitted, after = steps
    assert all(metrics["status"] == "ok" and reward == 0.0 for _, reward, metrics in writes)
    assert compiled[2]["status"] == "ok" and verified[2]["status"] == "ok", (compiled[0], verified[0])
    _, reward, metrics = submitted
    assert metrics["submitted"] and metrics["correct"] is True and metrics["tier"] >= 1
    assert reward == float(metrics["tier"]) and metrics["episode_return"] == reward
    assert after[1] == 0.0 and after[2]["status"] == "ended" and after[0].startswith("The episode has ended")
    assert len(EPISODES) == 0  # released: the episode is gone


def test_calls_from_verls_agent_loop_share_one_episode_per_trajectory(tmp_path: Path) -> None:
    """verl's loop creates and releases an instance around every call; the trajectory's episode lives on."""
    tools = load_tools(tmp_path, max_turns=3)
    loop = types.SimpleNamespace(tools=tools, max_tool_response_length=400, tool_response_truncate_side="middle")
    agent_data = AgentData(
        messages=[],
        image_data=None,
        video_data=None,
        audio_data=None,
        mm_processor_kwargs=None,
        metrics={},
        request_id="request-1",
        tools_kwargs=tools_kwargs(RELU),
    )

    async def call(trajectory: AgentData, name: str, **arguments: Any) -> str | None:
        tool_call = FunctionCall(name=name, arguments=json.dumps(arguments))
        response, reward, _ = await ToolAgentLoop._call_tool(loop, tool_call, trajectory.tools_kwargs, trajectory)
        trajectory.tool_rewards.append(reward)
        return response.text

    async def play(trajectory: AgentData) -> list[str | None]:
        return [
            await call(trajectory, "write_file", path="model_new.py", content="# first draft\n"),
            await call(trajectory, "run_tests"),  # verl answers unknown tools itself: no turn of the episode
            await call(trajectory, "read_file", path="model_new.py"),
            await call(trajectory, "read_file", path="model.py"),  # the third turn: the budget is spent
            await call(trajectory, "list_files"),
        ]

    written, unknown, read_back, last, after = asyncio.run(play(agent_data))
    assert written is not None and "Wrote model_new.py" in written
    assert unknown is not None and unknown.startswith("Unknown function 'run_tests'")
    assert read_back is not None and "# first draft" in read_back  # the write of an earlier instance
    assert last is not None and "...(truncated)..." in last and "turn budget (3) is spent" in last
    assert after is not None and after.startswith("The episode has ended")
    assert compute_score("cudagym", "", RELU, {"tool_rewards": agent_data.tool_rewards}) == 0.0
    assert len(agent_data.tool_rewards) == 5
    assert len(EPISODES) == 1  # ended, its figures kept while verl holds the trajectory
    del agent_data
    gc.collect()
    assert len(EPISODES) == 0


def test_a_call_without_a_task_is_refused(tmp_path: Path) -> None:
    tools = load_tools(tmp_path)

    async def untasked() -> None:
        instance_id, _ = await tools["list_files"].create()
        try:
            await tools["list_files"].execute(instance_id, {})
        finally:
            await tools["list_files"].release(instance_id)

    with pytest.raises(ValueError, match="a cudagym episode needs its task"):
        asyncio.run(untasked())
    assert len(EPISODES) == 0


def test_rows_carry_the_first_observation_and_the_task_for_every_tool() -> None:
    rows = make_rows("builtin", backend="cpu", max_turns=50, ids=[RELU])
    assert len(rows) == 1
    row = rows[0]
    assert row["agent_name"] == "tool_agent" and row["reward_model"]["ground_truth"] == RELU
    assert row["prompt"][0]["role"] == "user" and "class Model" in row["prompt"][0]["content"]
    assert "50" in row["prompt"][0]["content"]  # the turn budget the instructions name
    assert row["extra_info"]["tools_kwargs"] == tools_kwargs(RELU)
    assert set(row["extra_info"]["tools_kwargs"]) == {t.tool_name() for t in TOOLS}


def test_compute_score_sums_the_recorded_tool_rewards() -> None:
    assert compute_score("cudagym", "text", RELU, {"tool_rewards": [0.0, 0.0, 3.0]}) == 3.0
    assert compute_score("cudagym", "text", RELU, {"tool_rewards": []}) == 0.0
    with pytest.raises(KeyError, match="no tool_rewards"):
        compute_score("cudagym", "text", RELU, {})
