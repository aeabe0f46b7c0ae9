"""The OpenEnv plug, driven through OpenEnv's own server and clients: an episode to a reward over the WebSocket with
the typed client, the raw wire format with ``GenericEnvClient``, task discovery over HTTP, and ``cudagym
serve-openenv`` as a user starts it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from cudagym_testing import RELU, relu_solution

pytest.importorskip("openenv")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from cudagym.evaluator import EvalConfig  # noqa: E402
from cudagym.integrations.openenv import (  # noqa: E402
    ENV_NAME,
    CudaKernelAction,
    CudaKernelClient,
    create_openenv_app,
)
from cudagym.tasks import load  # noqa: E402
from cudagym.tools import TOOLS  # noqa: E402


@pytest.fixture(scope="module")
def base_url(fast_config: EvalConfig) -> Iterator[str]:
    """The OpenEnv server (uvicorn, in this process) on a free loopback port, cpu backend, two sessions at once."""
    app = create_openenv_app("builtin", backend="cpu", eval_config=fast_config, max_turns=12, max_concurrent_envs=2)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the OpenEnv server did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.mark.slow  # one real evaluation: the solution compiled, verified and timed
def test_an_episode_through_the_openenv_client_reaches_a_reward(base_url: str) -> None:
    """Reset, a malformed call, file tools, compile and submit over the WebSocket: every field arrives typed."""
    with CudaKernelClient(base_url=base_url).sync() as env:
        result = env.reset(task_id=RELU, episode_id="episode-1")
        first = result.observation
        assert not result.done and result.reward is None
        assert first.task_id == RELU and first.turn == 0 and first.max_turns == 12 and "class Model" in first.text
        assert [tool["function"]["name"] for tool in first.metadata["tools"]] == [t.tool_name() for t in TOOLS]

        result = env.step(CudaKernelAction(text="I will look around first."))  # no call: an observation, not an error
        assert result.observation.status == "invalid_call" and "No tool call found" in result.observation.text
        assert not result.done and result.reward == 0.0

        result = env.step(CudaKernelAction(text='<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'))
        assert result.observation.tool == "list_files" and "model.py" in result.observation.text
        for path, content in relu_solution().items():
            result = env.step(CudaKernelAction(name="write_file", arguments={"path": path, "content": content}))
            assert result.observation.status == "ok", result.observation.text
        result = env.step(CudaKernelAction(name="compile"))
        assert result.observation.tool == "compile" and result.observation.status == "ok", result.observation.text

        result = env.step(CudaKernelAction(name="submit"))
        final = result.observation
        assert result.done and not final.truncated and final.tool == "submit"
        assert final.metadata["tier"] >= 1 and final.metadata["correct"] is True
        assert result.reward == float(final.metadata["tier"])

        state = env.state()
        assert state.episode_id == "episode-1" and state.task_id == RELU and state.backend == "cpu"
        steps = 2 + len(relu_solution()) + 2  # the malformed call, list_files, the writes, compile, submit
        assert state.done and state.step_count == final.turn == steps and state.episode_return == result.reward


def test_the_generic_client_speaks_the_wire_format(base_url: str) -> None:
    """A client without cudagym's types: raw dicts both ways, the task chosen by split and index."""
    tasks = load("builtin")
    with GenericEnvClient(base_url=base_url).sync() as env:
        result = env.reset(split="builtin", index=3)
        assert result.observation["task_id"] == tasks[3].id
        result = env.step({"name": "read_file", "arguments": {"path": "model.py"}})
        assert result.observation["tool"] == "read_file" and "class Model" in result.observation["text"]
        assert result.reward == 0.0 and result.done is False
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # name and text together: refused, not guessed
            env.step({"name": "compile", "text": "compile"})
        result = env.step({"text": '{"name": "list_files", "arguments": {}}'})  # the session goes on
        assert result.observation["tool"] == "list_files" and result.observation["turn"] == 2
        with pytest.raises(RuntimeError, match=r"unknown reset option\(s\) \['level'\]"):
            env.reset(level=1)


def test_task_discovery_lists_the_task_set(base_url: str) -> None:
    tasks = load("builtin")
    with httpx.Client(base_url=base_url, timeout=60) as http:
        assert http.get("/list_environments").json() == [ENV_NAME]
        assert http.get(f"/{ENV_NAME}/splits").json() == [{"name": "builtin", "type": "validation"}]
        listed = http.post(f"/{ENV_NAME}/tasks", json={"split": "builtin"}).json()["tasks"]
        assert [spec["id"] for spec in listed] == list(tasks.ids)
        assert http.post(f"/{ENV_NAME}/num_tasks", json={"split": "builtin"}).json() == {"num_tasks": len(tasks)}
        task = http.post(f"/{ENV_NAME}/task", json={"split": "builtin", "index": 2}).json()["task"]
        assert task == listed[2] and task["index"] == 2 and task["name"] == tasks[2].name
        window = http.post(f"/{ENV_NAME}/task_range", json={"split": "builtin", "start": 1, "stop": 3}).json()
        assert window["tasks"] == listed[1:3]
        assert http.post(f"/{ENV_NAME}/task", json={"split": "builtin", "index": len(tasks)}).status_code == 400
        assert http.get("/metadata").json()["name"] == ENV_NAME


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_openenv_command_serves_the_task_api() -> None:
    """``cudagym serve-openenv`` as a user runs it: a process that answers OpenEnv's routes until it is stopped."""
    port = _free_port()
    command = [sys.executable, "-m", "cudagym.cli", "serve-openenv", "--backend", "cpu", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ)
    try:
        deadline = time.monotonic() + 90
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            while True:
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "cudagym serve-openenv did not answer in 90 s"
                try:
                    if http.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            splits = http.get(f"/{ENV_NAME}/splits").json()
            count = http.post(f"/{ENV_NAME}/num_tasks", json={"split": "builtin"}).json()
        assert splits == [{"name": "builtin", "type": "validation"}] and count == {"num_tasks": len(load("builtin"))}
    finally:
        server.terminate()
        server.communicate(timeout=30)
