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
