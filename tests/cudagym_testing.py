"""Helpers shared by test modules (tests/ is on sys.path through the root conftest)."""

from __future__ import annotations

from pathlib import Path

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.tasks import load

RELU = "builtin/relu"


def relu_solution(backend: str = "cpu") -> dict[str, str]:
    """The built-in ReLU task's reference solution for ``backend``, by workspace path."""
    root = Path(load("builtin").get(RELU).solutions[backend])
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def with_binding_forward(files: dict[str, str], body: str) -> dict[str, str]:
    """``files`` (a ReLU solution) with the forward function of its binding replaced by ``body``."""
    files = dict(files)
    binding = files["kernels/relu_binding.cpp"]
    start, end = binding.index("// Checks the input"), binding.index("static void bind")
    files["kernels/relu_binding.cpp"] = binding[:start] + body + "\n" + binding[end:]
    return files


def write_all(env: CudaKernelEnv, files: dict[str, str]) -> None:
    """Writes every file through the write_file tool, asserting each write succeeded."""
    for path, content in files.items():
        _, _, _, _, info = env.step(tool_call("write_file", path=path, content=content))
        assert info["status"] == "ok", info


def assert_caught(
    env: CudaKernelEnv, files: dict[str, str], expected: str | tuple[str, ...]
) -> tuple[str, set[str], set[str]]:
    """Submits ``files`` for builtin relu and asserts tier -1 (reward -1) with ``expected`` (a status or a failed
    integrity check's name, or several of which one must appear) among the stages' statuses and failed checks.
    Returns the observation, the names of ``expected`` and the names of the failed integrity checks."""
    names = {expected} if isinstance(expected, str) else set(expected)
    env.reset(options={"task_id": RELU})
    write_all(env, files)
    obs, reward, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and info["tier"] == -1 and reward == -1, obs
    result = info["result"]
    statuses = {result["status"], *(r["status"] for r in (result["verify"], result["profile"]) if r)}
    failed = {f["check"] for f in result["integrity"] if not f["passed"]}
    assert names & (statuses | failed), (statuses, failed, obs)
    return obs, names, failed
