"""ChatMessages: the conversation as observations, assistant messages (native tool calls or text) as actions."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest
from cudagym_testing import RELU
from gymnasium.utils.env_checker import check_env

import cudagym  # noqa: F401
from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.tools import TOOLS
from cudagym.wrappers import ChatMessages, to_hf, to_openai
from cudagym.wrappers.chat import NOT_EXECUTED


@pytest.fixture
def chat(fast_config: EvalConfig) -> Iterator[ChatMessages]:
    env = ChatMessages(CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=20), max_tool_chars=300)
    yield env
    env.close()


def native(name: str, call_id: str = "", **arguments: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    if call_id:
        entry["id"] = call_id
    return entry


def test_check_env_passes_on_the_wrapper(fast_config: EvalConfig) -> None:
    env = ChatMessages(CudaKernelEnv(backend="cpu", eval_config=fast_config))
    with pytest.warns(UserWarning, match="different from the unwrapped"):
        check_env(env, skip_render_check=True)
    env.close()


def test_check_env_passes_on_the_wrapped_made_env() -> None:
    env = ChatMessages(gym.make("CudaKernel-v0", backend="cpu", max_turns=10))
    with pytest.warns(UserWarning, match="different from the unwrapped"):
        check_env(env, skip_render_check=True)
    env.close()


def test_reset_gives_system_and_user_messages(chat: ChatMessages) -> None:
    messages, info = chat.reset(options={"task_id": RELU})
    assert chat.observation_space.contains(messages)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages
    assert system["content"].startswith("# Task: ReLU (builtin/relu)")
    assert all(f"- {tool.tool_name()}: " in system["content"] for tool in TOOLS)
    assert user["content"].startswith("## model.py\n") and "class Model" in user["content"]
    assert [t["function"]["name"] for t in info["tools"]] == [t.tool_name() for t in TOOLS]
    assert info["task_id"] == RELU
    assert to_openai(messages) == [
        {"role": "system", "content": system["content"]},
        {"role": "user", "content": user["content"]},
    ]


def test_native_tool_calls_get_tool_messages_tied_to_their_ids(chat: ChatMessages) -> None:
    chat.reset(options={"task_id": RELU})
    action = {
        "role": "assistant",
        "content": None,
        "tool_calls": [native("list_files", "call_a"), native("read_file", "call_b", path="model.py")],
    }
    messages, reward, terminated, truncated, info = chat.step(action)
    assert chat.observation_space.contains(messages)
    assert reward == 0 and not terminated and not truncated
    assistant, first, second = messages[2:]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b"]
    assert (first["role"], first["tool_call_id"]) == ("tool", "call_a") and "model.py" in first["content"]
    assert (second["role"], second["tool_call_id"]) == ("tool", "call_b") and "import torch" in second["content"]
    assert [c["id"] for c in info["calls"]] == ["call_a", "call_b"]
    assert info["turn"] == 2 and info["tool"] == "read_file"
    sent = to_openai(messages)
    assert sent[2] == {"role": "assistant", "content": None, "tool_calls": [dict(c) for c in assistant["tool_calls"]]}
    assert sent[3] == {"role": "tool", "content": first["content"], "tool_call_id": "call_a"}


def test_long_tool_output_is_cut_to_the_budget(chat: ChatMessages) -> None:
    chat.reset(options={"task_id": RELU})
    messages, *_ = chat.step({"tool_calls": [native("read_file", "c1", path="INSTRUCTIONS.md")]})
    content = messages[-1]["content"]
    assert len(content) <= 300 and "characters omitted" in content
    assert content.startswith("[read_file] OK") and content.rstrip().endswith("[turn 1/20]")


def test_calls_without_ids_and_arguments_as_objects(chat: ChatMessages) -> None:
    chat.reset(options={"task_id": RELU})
    entry = {"type": "function", "function": {"name": "read_file", "arguments": {"path": "model.py", "limit": 2}}}
    messages, *_ = chat.step({"content": "Let me look.", "tool_calls": [entry]})
    assistant, result = messages[2:]
    assert assistant["content"] == "Let me look."
    assert assistant["tool_calls"][0]["id"] == result["tool_call_id"] == "call_1_0"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"path": "model.py", "limit": 2}
    assert "2| import torch.nn as nn" in result["content"] and "3|" not in result["content"]


def test_text_calls_and_errors_come_back_as_user_messages(chat: ChatMessages) -> None:
    chat.reset(options={"task_id": RELU})
    messages, reward, terminated, _, info = chat.step(f"I will list the files. {tool_call('list_files')}")
    assert messages[-1]["role"] == "user" and messages[-1]["tool_call_id"] == ""
    assert "Workspace files" in messages[-1]["content"] and info["tool"] == "list_files"
    messages, reward, terminated, _, info = chat.step({"content": "I am done thinking."})
    assert messages[-1]["role"] == "user" and "No tool call found" in messages[-1]["content"]
    assert reward == 0 and not terminated and info["status"] == "invalid_call"
    messages, *_ = chat.step({"tool_calls": [native("rm_rf", "x")]})
    assert messages[-1]["role"] == "tool" and "Unknown tool 'rm_rf'" in messages[-1]["content"]


def test_unprintable_text_is_recorded_clean_but_executed_as_sent(chat: ChatMessages) -> None:
    chat.reset(options={"task_id": RELU})
    content = "// naïve kernel \u2192 fast\n"
    messages, *_ = chat.step({"tool_calls": [native("write_file", "w", path="kernels/k.cpp", content=content)]})
    assert chat.observation_space.contains(messages)
    assert set(messages[-2]["tool_calls"][0]["function"]["arguments"]) <= set(string.printable)
    assert (chat.unwrapped.workspace.path / "kernels/k.cpp").read_text() == content


def test_calls_after_the_end_are_not_executed(fast_config: EvalConfig) -> None:
    env = ChatMessages(CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=2))
    env.reset(options={"task_id": RELU})
    calls = [native("list_files", f"c{i}") for i in range(3)]
    messages, reward, terminated, truncated, info = env.step({"tool_calls": calls})
    assert truncated and not terminated and reward == 0
    assert [m["tool_call_id"] for m in messages[-3:]] == ["c0", "c1", "c2"]
    assert "turn budget (2) is spent" in messages[-2]["content"]
    assert messages[-1]["content"] == NOT_EXECUTED
    assert [c["id"] for c in info["calls"]] == ["c0", "c1"]
    env.close()


class _SdkMessage:
    """Stands in for the OpenAI SDK's ChatCompletionMessage (a pydantic model)."""

    def model_dump(self, exclude_none: bool = False) -> dict[str, Any]:
        return {"role": "assistant", "tool_calls": [native("list_files", "sdk_1")]}


def test_sdk_message_objects_are_accepted(chat: ChatMessages) -> None:
    chat.reset(options={"task_id": RELU})
    messages, *_ = chat.step(_SdkMessage())
    assert messages[-1]["tool_call_id"] == "sdk_1" and "Workspace files" in messages[-1]["content"]


def test_observations_are_fresh_objects(chat: ChatMessages) -> None:
    first, _ = chat.reset(options={"task_id": RELU})
    second, *_ = chat.step({"tool_calls": [native("list_files", "a")]})
    assert first[0] == second[0] and first[0] is not second[0]
    second[2]["tool_calls"][0]["function"]["name"] = "changed"
    assert chat.messages[2]["tool_calls"][0]["function"]["name"] == "list_files"


def test_sync_vector_env_of_chat_envs(fast_config: EvalConfig) -> None:
    def make() -> ChatMessages:
        return ChatMessages(CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=5))

    envs = gym.vector.SyncVectorEnv([make, make])
    observations, infos = envs.reset(seed=[3, 4])
    assert [m[0]["content"].split("\n")[0] for m in observations] == [f"# Task: {n}" for n in _names(infos)]
    observations, *_ = envs.step({"content": ("", ""), "tool_calls": ((native("list_files", "a"),), ())})
    assert observations[0][-1]["role"] == "tool" and observations[1][-1]["role"] == "user"
    envs.close()


def _names(infos: dict[str, Any]) -> list[str]:
    from cudagym.tasks import load

    tasks = load("builtin")
    return [f"{tasks.get(t).name} ({t})" for t in infos["task_id"]]


def test_to_hf_gives_argument_objects_or_text_and_no_null_content(chat: ChatMessages) -> None:
    chat.reset(options={"task_id": RELU})
    read = {"id": "r", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "model.py"}'}}
    bad = {"id": "b", "type": "function", "function": {"name": "list_files", "arguments": "{not json"}}
    obs, *_ = chat.step({"content": None, "tool_calls": [read]})
    assert to_openai(obs)[2]["content"] is None
    objects = to_hf(obs)
    assert objects[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{**read, "function": {"name": "read_file", "arguments": {"path": "model.py"}}}],
    }
    assert objects[3]["tool_call_id"] == "r" and "tool_calls" not in objects[3] and "tool_call_id" not in objects[0]
    strings = to_hf(obs, arguments="string", null_content="(tool calls)")
    assert strings[2]["content"] == "(tool calls)" and strings[2]["tool_calls"][0]["function"]["arguments"] == (
        '{"path": "model.py"}'
    )
    assert to_hf(to_openai(obs)) == objects and to_hf(obs)[1] == {"role": "user", "content": obs[1]["content"]}
    obs, *_ = chat.step({"content": "", "tool_calls": [bad]})
    with pytest.raises(ValueError, match=r"message 4, call 'b' \(list_files\).*arguments='string'"):
        to_hf(obs)
    assert to_hf(obs, arguments="string")[4]["tool_calls"][0]["function"]["arguments"] == "{not json"
    with pytest.raises(ValueError, match="'object' or 'string'"):
        to_hf(obs, arguments="dict")  # type: ignore[arg-type]


def test_to_hf_takes_openai_messages_too() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "compile", "arguments": {}}},
            {"id": "2", "type": "function", "function": {"name": "verify", "arguments": ""}},
        ]},
    ]  # fmt: skip
    hf = to_hf(messages)
    assert hf[0] == {"role": "user", "content": "a b"}
    assert [c["function"]["arguments"] for c in hf[1]["tool_calls"]] == [{}, {}]
    assert [c["function"]["arguments"] for c in to_hf(messages, arguments="string")[1]["tool_calls"]] == ["{}", ""]
    assert messages[1]["content"] is None  # the input is left as it was
