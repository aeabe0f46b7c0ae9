"""cudagym.integrations.verifiers under verifiers' own evaluation: ``vf-eval``'s parse and runner, a loopback model.

The model is a loopback OpenAI-compatible server (tests/chat_stub.py) answering with scripted native tool calls;
everything between it and cudagym is verifiers': the taskset loading, the interception server, the null harness's
chat program, the toolset started for the rollout (``python -m cudagym.integrations.verifiers``) and reached over
MCP, the shared state, the stop and the scoring. One thing is provided here: the harness's program runs on this
interpreter, which has its dependencies (verifiers' own), instead of in an environment ``uv`` would download.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from chat_stub import ChatStub, text_reply, tool_call_reply
from cudagym_testing import RELU

from cudagym.integrations.episode import EpisodeAccount
from cudagym.tools import tool_schemas

if TYPE_CHECKING:
    from verifiers.v1.configs.cli.eval import EvalConfig

# verifiers is imported by the tests, not when every xdist worker collects this file
pytestmark = pytest.mark.skipif(importlib.util.find_spec("verifiers") is None, reason="needs cudagym[verifiers]")

BROKEN_MODEL_NEW = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"  # compiles, has no forward

REPLIES = [
    tool_call_reply(("call_1", "list_files", {}), ("call_2", "read_file", {"path": "model.py", "limit": 2})),
    tool_call_reply(("call_3", "write_file", {"path": "model_new.py", "content": BROKEN_MODEL_NEW})),
    tool_call_reply(("call_4", "read_file", {"path": "model_new.py", "lines": 3})),  # an argument the tool lacks
    tool_call_reply(("call_5", "submit", {})),
    text_reply("Never asked for: the episode ended at the submit."),
]


@pytest.fixture
def local_chat_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """verifiers' runtimes prepare the harness's chat program with ``uv`` (installing it, and the program's
    dependencies, from the network); here the program runs on this interpreter, and the runtimes' folders are
    under ``tmp_path``."""
    from verifiers.v1.runtimes import subprocess as subprocess_runtime

    async def prepare(runtime: Any, script: str | bytes, env: Any = None, *, activate: bool = True) -> list[str]:
        path = tmp_path / "chat_program.py"
        path.write_bytes(script.encode() if isinstance(script, str) else script)
        return [sys.executable, str(path)]

    monkeypatch.setattr(subprocess_runtime.SubprocessRuntime, "prepare_uv_script", prepare)
    monkeypatch.setattr(subprocess_runtime, "CACHE_DIR", tmp_path / "verifiers-cache")
    monkeypatch.setenv("STUB_API_KEY", "test")
    yield


def vf_eval_config(argv: list[str]) -> EvalConfig:
    """What ``vf-eval ARGV`` would run: the CLI's own parse of the arguments."""
    from pydantic_config import cli
    from verifiers.v1.cli.resolve import narrow_config, with_positional_taskset
    from verifiers.v1.configs.cli.eval import EvalConfig

    argv = with_positional_taskset(argv)
    return cli(narrow_config(EvalConfig, argv), args=argv)


@pytest.mark.slow  # starts the toolset's and the chat program's interpreters; CI runs it (only gpu is deselected)
def test_vf_eval_plays_a_task_through_the_toolset(tmp_path: Path, local_chat_program: None) -> None:
    from verifiers.v1.cli.eval.runner import run_eval

    with ChatStub(REPLIES, lifetime=300) as stub:
        config = vf_eval_config(
            [
                "cudagym-verifiers",
                "-m", "stub-model",
                "--client.base-url", stub.base_url,
                "--client.api-key-var", "STUB_API_KEY",
                "--no-push", "--no-rich",
                "-o", str(tmp_path / "outputs"),
                "--env.taskset.task-options", json.dumps({"ids": [RELU]}),
                "--env.taskset.task.tools.backend", "cpu",
                "--env.taskset.task.tools.quick-eval",
                "--env.taskset.task.tools.max-turns", "10",
            ]
        )  # fmt: skip
        (episode,) = asyncio.run(run_eval(config))
        requests = stub.requests

    (trace,) = episode.traces
    assert trace.ok and not trace.errors, trace.errors
    assert trace.stop_condition == "episode_ended"  # the submit ended it: the fifth reply was never asked for
    assert len(requests) == 4
    # the model saw cudagym's eight tools, by their own names and with their own schemas
    offered = {tool["function"]["name"]: tool["function"]["parameters"] for tool in requests[0]["tools"]}
    assert offered == {schema["name"]: schema["parameters"] for schema in tool_schemas("json")}
    first = requests[0]["messages"]
    assert [m["role"] for m in first] == ["user"] and first[0]["content"].startswith("# Task: ReLU (builtin/relu)")
    # each native call ran in the rollout's environment and came back as its tool message
    results = {m["tool_call_id"]: m["content"] for r in requests for m in r["messages"] if m["role"] == "tool"}
    assert "model_new.py" in results["call_1"] and "2| import torch.nn" in results["call_2"]
    assert "Wrote model_new.py" in results["call_3"]
    assert "INVALID CALL" in results["call_4"] and "lines" in results["call_4"]  # the env named the bad argument
    # the reward is cudagym's milestone reward; the outcome and each reward term are metrics
    assert {name: reward.score for name, reward in trace.rewards.items()} == {"cudagym_return": -1.0}
    assert trace.reward == -1.0
    assert trace.metrics == {
        "turns": 5.0,
        "submitted": 1.0,
        "compiled": 1.0,
        "correct": 0.0,
        "tier": -1.0,
        "reward_tier": -1.0,
    }
    assert trace.state.episode is not None and trace.state.episode.task_id == RELU
    saved = (Path(config.output_dir) / str(config.run.dir) / "traces.jsonl").read_text().splitlines()
    assert len(saved) == 1 and json.loads(saved[0])["traces"][0]["rewards"]["cudagym_return"]["score"] == -1.0


def test_the_taskset_prompts_each_task_with_its_first_observation() -> None:
    from cudagym.integrations.verifiers import CudaKernelTaskset, CudaKernelTasksetConfig

    config = CudaKernelTasksetConfig(id="cudagym-verifiers", task_options={"ids": [RELU, "builtin/softmax"]})
    config.task.tools.backend = "cpu"
    tasks = list(CudaKernelTaskset(config))
    assert [task.data.task_id for task in tasks] == [RELU, "builtin/softmax"]
    assert [task.data.idx for task in tasks] == [0, 1] and tasks[0].data.id == RELU
    assert tasks[0].data.prompt.startswith("# Task: ReLU (builtin/relu)") and "class Model" in tasks[0].data.prompt
    assert tasks[1].data.task_options == {"ids": [RELU, "builtin/softmax"]}
    (toolset,) = type(tasks[0]).toolsets(tasks[0].config)
    assert toolset.config.backend == "cpu" and toolset.server_name == ""  # the tools keep their own names


def test_the_task_scores_from_the_shared_state() -> None:
    from cudagym.integrations.verifiers import CudaKernelState, CudaKernelTaskset, CudaKernelTasksetConfig

    task = next(iter(CudaKernelTaskset(CudaKernelTasksetConfig(id="cudagym-verifiers", task_options={"ids": [RELU]}))))

    def scored(episode: EpisodeAccount | None) -> tuple[bool, float, dict[str, float]]:
        trace = SimpleNamespace(state=CudaKernelState(episode=episode))  # what the scoring hooks read of a trace
        ended = asyncio.run(task.episode_ended(trace))
        return ended, asyncio.run(task.cudagym_return(trace)), asyncio.run(task.cudagym_outcome(trace))

    assert scored(None) == (False, 0.0, {"turns": 0.0, "submitted": 0.0})  # the model called no tool
    played = EpisodeAccount(task_id=RELU, turns=4, episode_return=2.0, reward_terms={"tier": 2.0}, ended=True)
    played = played.model_copy(update={"submitted": True, "tier": 2, "compiled": True, "correct": True})
    played = played.model_copy(update={"speedup_eager": 1.5, "timing_fair": True})
    ended, value, metrics = scored(played)
    assert ended and value == 2.0
    assert metrics == {
        "turns": 4.0,
        "submitted": 1.0,
        "compiled": 1.0,
        "correct": 1.0,
        "tier": 2.0,
        "speedup_eager": 1.5,
        "reward_tier": 2.0,
    }
    failed = played.model_copy(update={"harness_error": "the evaluation service is not there", "episode_return": 0.0})
    with pytest.raises(RuntimeError, match="could not evaluate the submit: the evaluation service is not there"):
        asyncio.run(task.cudagym_return(SimpleNamespace(state=CudaKernelState(episode=failed))))
