"""CudaKernelEnv on the CPU backend: Gymnasium conformance and whole episodes through tool-call text."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import string
from typing import Any

import gymnasium as gym
import pytest
from cudagym_testing import RELU, relu_solution, resource_warnings_as_errors, write_all
from gymnasium.utils.env_checker import check_env

import cudagym  # noqa: F401
from cudagym import compile_gate
from cudagym.baselines import tool_call
from cudagym.compile_gate import check_workspace
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig


def test_check_env_passes_on_the_raw_env(fast_config: EvalConfig) -> None:
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config)
    check_env(env, skip_render_check=False)
    env.close()


def test_check_env_passes_on_the_made_env() -> None:
    env = gym.make("CudaKernel-v0", backend="cpu")
    with pytest.warns(UserWarning, match="wrapped"):
        check_env(env)
    env.close()


def test_reset_is_deterministic_and_selectable(env: CudaKernelEnv) -> None:
    first, info = env.reset(seed=3)
    again, info_again = env.reset(seed=3)
    assert first == again and info == info_again
    obs, info = env.reset(options={"task_id": RELU})
    assert info["task_id"] == RELU
    assert "# Task: ReLU" in obs and "class Model" in obs and "write_file" in obs
    assert env.observation_space.contains(obs)


def test_correct_episode_reaches_a_positive_tier(
    fast_config: EvalConfig, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole compile-verify-profile-submit episode, which leaves no pipe or file unclosed (ResourceWarning) and
    logs each stage's outcome (at INFO; a build found in the cache at DEBUG). Every stage passes the gate before the
    build once: a submit too, whose verify and profile take its compile."""
    gates: list[str] = []

    def counted(workspace: Any, policy: Any) -> Any:
        gates.append("gate")
        return check_workspace(workspace, policy)

    monkeypatch.setattr(compile_gate, "check_workspace", counted)
    with resource_warnings_as_errors(), caplog.at_level(logging.DEBUG, logger="cudagym"):
        env = CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=50)
        try:
            _play_the_correct_episode(env)
        finally:
            env.close()
    assert len(gates) == 4  # compile, verify, profile: one each; submit: one for its three stages
    outcomes = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    for prefix in (f"verify {RELU}: ok in", f"profile {RELU}: ok in", f"submit {RELU}: ok, tier"):
        assert any(message.startswith(prefix) for message in outcomes), (prefix, outcomes)
    assert any(r.getMessage().startswith("compile: ok in") for r in caplog.records if r.name == "cudagym.build")


def _play_the_correct_episode(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution())
    obs, reward, terminated, truncated, info = env.step(tool_call("compile"))
    assert info["status"] == "ok" and reward == 0 and not terminated
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] == "ok", obs
    assert "check 3: pass" in obs
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] == "ok", obs
    assert "torch.compile" in obs and info["result"]["candidate_ms"] > 0
    obs, reward, terminated, truncated, info = env.step(tool_call("submit"))
    assert terminated and not truncated
    assert info["tier"] >= 1 and reward == info["tier"]
    assert info["compiled"] and info["correct"]
    assert info["speedup_eager"] > 0 and info["speedup_compile"] > 0
    assert {f["check"] for f in info["integrity"]} >= {"fixed_files_unchanged", "timed_output_rechecked"}
    assert info["reward_terms"] == {"tier": info["tier"]}
    assert env.observation_space.contains(obs)


def test_wrong_kernel_gets_minus_one_and_shows_the_mismatch(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    files = relu_solution()
    files["kernels/relu.cpp"] = files["kernels/relu.cpp"].replace("v > 0.0f ? v : 0.0f", "v > 0.0f ? v : 0.5f * v")
    write_all(env, files)
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] == "mismatch"
    assert "max abs error" in obs and "at index [" in obs and "check 1: FAIL" in obs
    obs, reward, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and reward == -1 and info["tier"] == -1 and info["compiled"] and not info["correct"]
    assert "outside tolerance" in obs


def test_compile_error_reaches_the_observation(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    files = relu_solution()
    files["kernels/relu.cpp"] += "\nint broken( { return 0; }\n"
    write_all(env, files)
    obs, _, _, _, info = env.step(tool_call("compile"))
    assert info["status"] == "compile_error"
    assert "kernels/relu.cpp:" in obs and "error:" in obs
    assert "/tmp/" not in obs  # workspace paths are hidden
    obs, reward, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and reward == -1 and not info["compiled"]
    assert "error:" in obs


def test_cuda_files_are_refused_on_the_cpu_backend(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    env.step(tool_call("write_file", path="kernels/k.cu", content="__global__ void k() {}"))
    obs, _, _, _, info = env.step(tool_call("compile"))
    assert info["status"] == "compile_error" and "need the cuda backend" in obs


def test_verify_without_model_new_explains(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    files = relu_solution()
    del files["model_new.py"]
    write_all(env, files)
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] == "load_error" and "model_new.py does not exist" in obs


def test_file_errors_and_bad_calls_do_not_end_the_episode(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    for action in [
        "nonsense",
        tool_call("write_file", path="model.py", content="x"),
        tool_call("read_file", path="../etc/passwd"),
        '{"name": "submit", "arguments": {"now": 1}}',
    ]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert not terminated and not truncated and reward == 0
        assert info["status"] in ("invalid_call", "file_error")
        assert set(obs) <= set(string.printable)


def test_non_ascii_text_round_trips_through_the_file_tools(env: CudaKernelEnv) -> None:
    """What write_file writes is the file's UTF-8; read_file shows what the observation space cannot hold as
    escapes; an edit_file copied from that observation applies to the file's real text."""
    env.reset(options={"task_id": RELU})
    content = "// r\u00e9sum\u00e9: \u03bb \u2192 \U0001f600 \u2014 done\nint x = 1;\n"
    env.step(tool_call("write_file", path="kernels/notes.h", content=content))
    target = env.workspace.path / "kernels/notes.h"
    assert target.read_bytes() == content.encode("utf-8")
    obs, _, _, _, info = env.step(tool_call("read_file", path="kernels/notes.h"))
    assert set(obs) <= set(string.printable)
    shown = obs.splitlines()[1].split("| ", 1)[1]
    assert shown == "// r\\u00e9sum\\u00e9: \\u03bb \\u2192 \\U0001f600 \\u2014 done"
    renamed = shown.replace("r\\u00e9sum\\u00e9", "na\\u00efve")
    obs, _, _, _, info = env.step(tool_call("edit_file", path="kernels/notes.h", old_string=shown, new_string=renamed))
    assert info["status"] == "ok", obs
    assert target.read_text(encoding="utf-8") == "// na\u00efve: \u03bb \u2192 \U0001f600 \u2014 done\nint x = 1;\n"
    # the characters themselves (an agent that decoded the escapes) match as they are
    decoded = tool_call("edit_file", path="kernels/notes.h", old_string="\u03bb \u2192", new_string="->")
    obs, _, _, _, info = env.step(decoded)
    assert info["status"] == "ok", obs
    assert target.read_text(encoding="utf-8").startswith("// na\u00efve: -> \U0001f600")


def test_truncation_at_max_turns(fast_config: EvalConfig) -> None:
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=2)
    env.reset(seed=0)
    assert env.step(tool_call("list_files"))[3] is False
    obs, reward, terminated, truncated, _ = env.step(tool_call("list_files"))
    assert truncated and not terminated and reward == 0 and "turn budget (2) is spent" in obs
    obs, _reward, terminated, _, info = env.step(tool_call("list_files"))
    assert terminated and info["result"]["status"] == "not_ready"
    env.close()


def test_render_ansi_prints_the_episode(fast_config: EvalConfig) -> None:
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config, render_mode="ansi")
    env.reset(options={"task_id": RELU})
    env.step(tool_call("read_file", path="model.py"))
    text = env.render()
    assert "=== reset: builtin/relu" in text and "--- turn 1 action ---" in text and "torch.relu" in text
    env.close()


def test_close_removes_the_workspace_and_leaves_no_child(fast_config: EvalConfig) -> None:
    # children this process had before (multiprocessing's resource tracker after a vector-env test) are not the env's
    before = set(_children_of(os.getpid()))
    env = CudaKernelEnv(backend="cpu", eval_config=fast_config)
    env.reset(options={"task_id": RELU})
    workspace = env.workspace.path
    write_all(env, relu_solution())
    env.step(tool_call("verify"))
    reference = env.evaluator._reference.child.proc.pid
    assert os.path.exists(f"/proc/{reference}")
    env.close()
    env.close()
    assert not workspace.exists()
    assert not os.path.exists(f"/proc/{reference}") or "zombie" in open(f"/proc/{reference}/status").read()
    assert not set(_children_of(os.getpid())) - before


def _children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(entry))
    return kids


def test_tool_schemas_from_the_env(env: CudaKernelEnv) -> None:
    names = [s["function"]["name"] for s in env.tool_schemas("openai")]
    assert names == ["write_file", "edit_file", "read_file", "list_files", "compile", "verify", "profile", "submit"]
    assert json.dumps(env.tool_schemas("anthropic"))


def test_info_is_plain_data(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    _, _, _, _, info = env.step(tool_call("list_files"))
    json.dumps(info)
    assert dataclasses.is_dataclass(env._history[0].result)
