"""The examples run: the OpenAI loop against a loopback stub of a chat-completions server; the TRL and verifiers
examples build on the package's plugs (which tests/integrations drives through the real libraries)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from chat_stub import ChatStub
from cudagym_testing import RELU

from cudagym.evaluator import EvalConfig
from cudagym.tools import TOOLS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """Imports examples/<name>.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"cudagym_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# -- a scripted conversation for the loopback OpenAI-compatible server (tests/chat_stub.py) --------------


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


SCRIPT: list[dict[str, Any]] = [
    {"content": None, "tool_calls": [_call("call_1", "list_files"), _call("call_2", "read_file", path="model.py")]},
    {"content": "Now a kernel.", "tool_calls": [_call("call_3", "write_file", path="kernels/k.cpp", content="int x;")]},
    {"content": "I think I am done."},  # no tool call: the environment says so, and the turn budget ends
]


@pytest.fixture
def stub() -> Iterator[ChatStub]:
    with ChatStub([dict(message, role="assistant") for message in SCRIPT]) as server:
        yield server


def test_openai_loop_against_a_loopback_server(stub: ChatStub, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("openai")
    example = load_example("openai_loop")
    argv = ["--base-url", stub.base_url, "--api-key", "test", "--model", "stub-model", "--backend", "cpu"]
    assert example.main([*argv, "--task", RELU, "--max-turns", "4"]) == 0
    out = capsys.readouterr().out
    assert f"== {RELU}: return 0 after 4 turns (not submitted)" in out

    assert len(stub.requests) == 3  # the stub answers 404 off /v1/chat/completions, so these hit the right path
    first, second, third = stub.requests
    assert first["model"] == "stub-model"
    assert [t["function"]["name"] for t in first["tools"]] == [t.tool_name() for t in TOOLS]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][0]["content"].startswith("# Task: ReLU (builtin/relu)")
    # the second request carries the assistant's calls and one tool message per call id
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    assistant, *tools = second["messages"][2:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"] and assistant["content"] is None
    assert [t["tool_call_id"] for t in tools] == ["call_1", "call_2"]
    assert "model.py" in tools[0]["content"] and "class Model" in tools[1]["content"]
    assert "Wrote kernels/k.cpp" in third["messages"][-1]["content"]
    assert third["messages"][-1]["tool_call_id"] == "call_3"


def test_run_episode_reports_what_happened(stub: ChatStub, fast_config: EvalConfig) -> None:
    openai = pytest.importorskip("openai")
    example = load_example("openai_loop")
    from cudagym.envs import CudaKernelEnv
    from cudagym.wrappers import ChatMessages

    env = ChatMessages(CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=3))
    client = openai.OpenAI(base_url=stub.base_url, api_key="test", max_retries=0)
    lines: list[str] = []
    result = example.run_episode(client, "m", env, task_id=RELU, echo=lines.append, temperature=0.0)
    env.close()
    assert result.truncated and not result.terminated and result.turns == 3 and result.total_reward == 0
    assert result.task_id == RELU and result.final_info["tool"] == "write_file"
    assert lines[0] == "[request 1] tool calls: ['list_files', 'read_file']"
    assert stub.requests[0]["temperature"] == 0.0


# -- the plugs' examples: thin scripts over cudagym.integrations (tested in tests/integrations) --------------------


def test_trl_example_builds_on_the_package_class() -> None:
    pytest.importorskip("trl")
    from cudagym.integrations.trl import CudaKernelToolEnv, make_dataset

    example = load_example("trl_environment_factory")
    assert example.CudaKernelToolEnv is CudaKernelToolEnv and example.make_dataset is make_dataset
    args = example.parse_args(["--backend", "cpu", "--max-turns", "7"])
    assert (args.backend, args.max_turns, args.task_set) == ("cpu", 7, "builtin")


def test_verifiers_example_configures_the_cudagym_taskset() -> None:
    pytest.importorskip("verifiers.v1")
    from cudagym.integrations.verifiers import CudaKernelEnvConfig, CudaKernelTasksetConfig

    example = load_example("verifiers_rollout")
    argv = ["--base-url", "http://127.0.0.1:1/v1", "--model", "m", "--backend", "cpu", "--task", RELU]
    config = example.eval_config(example.parse_args(argv))
    assert isinstance(config.env, CudaKernelEnvConfig) and isinstance(config.env.taskset, CudaKernelTasksetConfig)
    assert config.env.taskset.task_options == {"ids": [RELU]} and config.env.taskset.task.tools.backend == "cpu"
    assert config.client.base_url == "http://127.0.0.1:1/v1" and not config.push
    assert config.env.agent.harness is not None and config.env.agent.harness.id == "null"
