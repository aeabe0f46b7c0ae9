"""The llm agent against a loopback OpenAI-compatible endpoint that replays scripted replies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_stub import TOKENS_PER_REPLY, text_reply, tool_call_reply
from cudagym_testing import RELU, relu_solution

from cudagym.baselines import tool_call
from cudagym.baselines.llm_agent import SKIPPED_CALL, LLMAgent, LLMConfig
from cudagym.envs import CudaKernelEnv
from cudagym.eval_cli import main as eval_main
from cudagym.evaluation import play_episode, read_trajectories
from cudagym.evaluator import EvalConfig
from cudagym.metrics import read_results
from cudagym.tasks import load
from cudagym.tools import tool_schemas

pytest.importorskip("openai")

TASK = load("builtin").get(RELU)


def agent_for(stub, **options) -> LLMAgent:
    sleeps: list[float] = []
    config = LLMConfig(model="stub-model", base_url=stub.base_url, api_key="k", backoff_initial=0.01, **options)
    agent = LLMAgent(config, sleep=sleeps.append)
    agent.sleeps = sleeps  # type: ignore[attr-defined]
    return agent


@pytest.fixture(scope="module")
def env(fast_config: EvalConfig):
    environment = CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=20)
    yield environment
    environment.close()


def test_native_tool_calls_episode(env: CudaKernelEnv, chat_stub) -> None:
    stub = chat_stub(
        [
            503,  # retried
            tool_call_reply(("call_a", "read_file", {"path": "model.py"})),
            tool_call_reply(("call_b", "list_files", {}), ("call_c", "compile", {}), content="Two at once."),
            tool_call_reply(("call_d", "submit", {})),  # nothing written: tier -1, but the episode completes
        ]
    )
    agent = agent_for(stub)
    result, trajectory = play_episode(env, agent, TASK)
    agent.close()
    assert result.submitted and result.tier == -1 and result.turns == 3 and result.stop_reason == "submitted"
    assert result.tokens == 3 * TOKENS_PER_REPLY and result.agent == "llm"
    assert agent.episode_stats()["retries"] == 1 and len(agent.sleeps) == 1  # type: ignore[attr-defined]
    assert [s.tool for s in trajectory.steps] == ["read_file", "list_files", "submit"]

    assert len(stub.requests) == 4  # the 503 and three answers; none after submit
    first = stub.requests[0]
    assert first["model"] == "stub-model" and first["tools"] == tool_schemas("openai")
    system, user = first["messages"]
    assert system["role"] == "system" and "# Task: ReLU" in system["content"]
    assert user["role"] == "user" and user["content"].startswith("## model.py\n")
    messages = stub.requests[3]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "tool"]
    assert messages[2]["tool_calls"][0]["id"] == "call_a"
    assert messages[3]["tool_call_id"] == "call_a" and "class Model" in messages[3]["content"]
    assert messages[4]["content"] == "Two at once." and len(messages[4]["tool_calls"]) == 2
    assert messages[5]["tool_call_id"] == "call_b" and "model_new.py" in messages[5]["content"]
    assert messages[6] == {"role": "tool", "tool_call_id": "call_c", "content": SKIPPED_CALL}


def test_text_tool_calls_play_the_reference_solution_through_the_cli(tmp_path: Path, chat_stub, capsys) -> None:
    files = relu_solution()
    replies = [text_reply("Let me read the reference first.\n" + tool_call("read_file", path="model.py"))]
    for path, text in files.items():
        replies.append(text_reply(f"Writing {path}.\n{tool_call('write_file', path=path, content=text)}"))
    replies += [text_reply(tool_call("compile")), text_reply("Submitting.\n" + tool_call("submit"))]
    stub = chat_stub(replies)
    out, traj, rft = tmp_path / "r.jsonl", tmp_path / "t.jsonl", tmp_path / "rft.jsonl"
    status = eval_main(["eval", "--agent", "llm", "--model", "stub-model", "--base-url", stub.base_url,
                        "--tool-mode", "text", "--api-key-env", "CUDAGYM_TEST_NO_SUCH_KEY", "--ids", RELU,
                        "--backend", "cpu", "--quick", "--out", str(out), "--trajectories", str(traj),
                        "--no-progress"])  # fmt: skip
    assert status == 0, capsys.readouterr()
    (result,) = read_results(out)
    assert result.tier >= 1 and result.correct and result.turns == len(files) + 3, result
    assert result.tokens == len(replies) * TOKENS_PER_REPLY
    assert "tools" not in stub.requests[0]
    second = stub.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"].startswith("Let me read") and "[read_file] OK" in second[3]["content"]

    assert eval_main(["rft-export", str(traj), str(rft)]) == 0
    (line,) = [json.loads(x) for x in rft.read_text().splitlines()]
    assistant = [m for m in line["messages"] if m["role"] == "assistant"]
    assert assistant[0]["content"] == "Let me read the reference first."
    assert json.loads(assistant[0]["tool_calls"][0]["function"]["arguments"]) == {"path": "model.py"}
    assert [m["role"] for m in line["messages"]].count("tool") == len(read_trajectories(traj)[0].steps)


def test_token_budget_and_turn_limit_stop_the_episode(env: CudaKernelEnv, chat_stub) -> None:
    read = tool_call_reply(("c", "read_file", {"path": "model.py"}))
    stub = chat_stub([read] * 5)
    result, _ = play_episode(env, agent_for(stub, token_budget=2 * TOKENS_PER_REPLY - 1), TASK)
    assert (result.stop_reason, result.turns, result.tokens) == ("agent_stopped", 2, 2 * TOKENS_PER_REPLY)
    assert result.stop_detail.startswith("token budget spent (200 >= 199")
    result, _ = play_episode(env, agent_for(stub, max_turns=1), TASK)
    assert (result.stop_reason, result.turns, result.stop_detail) == ("agent_stopped", 1, "max_turns (1) reached")


def test_api_errors_end_the_episode_as_an_error(env: CudaKernelEnv, chat_stub) -> None:
    stub = chat_stub([401])
    result, _ = play_episode(env, agent_for(stub), TASK)
    assert result.stop_reason == "error" and result.turns == 0 and "AuthenticationError 401" in result.error
    stub = chat_stub([500, 502, 503])
    agent = agent_for(stub, max_retries=2, backoff_max=0.015)
    result, _ = play_episode(env, agent, TASK)
    assert result.stop_reason == "error" and "after 3 attempts" in result.error and len(stub.requests) == 3
    first, second = agent.sleeps  # type: ignore[attr-defined]
    assert 0.005 <= first <= 0.01 and 0.0075 <= second <= 0.015  # 0.01 * 2**k (capped at 0.015), jitter 0.5-1


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="tool_mode"):
        LLMConfig(tool_mode="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="token_budget"):
        LLMConfig(token_budget=0)
    assert LLMConfig(api_key_env="CUDAGYM_TEST_NO_SUCH_KEY").resolved_api_key() == "EMPTY"
