"""Helpers shared by test modules (tests/ is on sys.path through the root conftest)."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cudagym.backends import Backend, Toolchain, find_toolchain
from cudagym.baselines import tool_call
from cudagym.build import Builder, BuildOptions, CompileUnit
from cudagym.envs import CudaKernelEnv
from cudagym.results import CompileResult, Status
from cudagym.tasks import Task, TaskMetadata, load
from cudagym.workspace import Workspace

RELU = "builtin/relu"

_ELEMENTWISE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expression}


batch_size = 64
dim = 98304


def get_inputs():
    return [torch.{draw}(batch_size, dim)]


def get_init_inputs():
    return []
"""
# KernelBench-shaped elementwise tasks at the built-in ReLU's cpu size (6.3 M elements): degenerate on their own inputs
RELU_RAND = Task(  # ReLU on inputs in [0, 1), as KernelBench draws them: the identity there
    id="probe/relu_rand",
    name="ReLU on rand()",
    source=_ELEMENTWISE.format(expression="torch.relu(x)", draw="rand"),
    metadata=TaskMetadata(ops=("torch.relu",), input_kinds=("task",)),
)
TINY_RELU = Task(  # outputs below the tolerance (atol 1e-2) on every input kind: zeros pass whatever the inputs
    id="probe/tiny_relu",
    name="ReLU times 1e-6",
    source=_ELEMENTWISE.format(expression="torch.relu(x) * 1e-6", draw="randn"),
    metadata=TaskMetadata(ops=("torch.relu",), input_kinds=("task",)),
)


def relu_solution(backend: str = "cpu") -> dict[str, str]:
    """The built-in ReLU task's reference solution for ``backend``, by workspace path."""
    root = Path(load("builtin").get(RELU).solutions[backend])
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def with_relu_op(expression: str, backend: str = "cpu") -> dict[str, str]:
    """The built-in ReLU solution for ``backend`` computing ``expression`` of ``v`` (an element of x) instead."""
    files = relu_solution(backend)
    if backend == "cpu":
        kernel = files["kernels/relu.cpp"]
        files["kernels/relu.cpp"] = kernel.replace("y[i] = v > 0.0f ? v : 0.0f;", f"y[i] = {expression};")
    else:
        kernel = files["kernels/relu.cu"]
        files["kernels/relu.cu"] = kernel.replace("return fmaxf(v, 0.0f);", f"return {expression};")
    assert files != relu_solution(backend), "the ReLU solution's kernel changed: update with_relu_op"
    return files


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


def submit_files(env: CudaKernelEnv, task_id: str, files: dict[str, str]) -> tuple[str, float, dict[str, Any]]:
    """Resets to ``task_id``, writes ``files`` and submits; returns the observation, reward and info of the submit."""
    env.reset(options={"task_id": task_id})
    write_all(env, files)
    obs, reward, terminated, _, info = env.step(tool_call("submit"))
    assert terminated, obs
    return obs, float(reward), info


def assert_caught(
    env: CudaKernelEnv, files: dict[str, str], expected: str | tuple[str, ...]
) -> tuple[str, set[str], set[str]]:
    """Submits ``files`` for builtin relu and asserts tier -1 (reward -1) with ``expected`` (a status or a failed
    integrity check's name, or several of which one must appear) among the stages' statuses and failed checks.
    Returns the observation, the names of ``expected`` and the names of the failed integrity checks."""
    names = {expected} if isinstance(expected, str) else set(expected)
    obs, reward, info = submit_files(env, RELU, files)
    assert info["tier"] == -1 and reward == -1, obs
    result = info["result"]
    statuses = {result["status"], *(r["status"] for r in (result["verify"], result["profile"]) if r)}
    failed = {f["check"] for f in result["integrity"] if not f["passed"]}
    assert names & (statuses | failed), (statuses, failed, obs)
    return obs, names, failed


@contextlib.contextmanager
def resource_warnings_as_errors(settle_s: float = 5.0) -> Iterator[None]:
    """Turns every ResourceWarning raised inside the block into an error, also those raised where Python cannot
    propagate them (a file closed by the garbage collector or in another thread ends up in ``sys.unraisablehook``);
    at the end of the block, after the threads that read the children's pipes ended (at most ``settle_s``) and a
    collection, any caught fails the test with what was left open."""
    caught: list[str] = []
    previous_hook = sys.unraisablehook

    def collect(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, ResourceWarning):
            caught.append(str(unraisable.exc_value))
        else:
            previous_hook(unraisable)

    threads_before = set(threading.enumerate())
    sys.unraisablehook = collect
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", ResourceWarning)
            yield
            deadline = time.monotonic() + settle_s
            for thread in set(threading.enumerate()) - threads_before:
                thread.join(max(0.0, deadline - time.monotonic()))
            gc.collect()
    finally:
        sys.unraisablehook = previous_hook
    assert not caught, f"{len(caught)} ResourceWarning(s): {caught}"


# -- builds against stand-in torch headers (tests/test_light_headers.py, test_kernel_split.py, test_header_reads.py) -

NVCC_ONLY = Backend(name="cuda", device="cuda", device_name="nvcc only", arch="sm_90")  # compiles; no GPU needed


@dataclasses.dataclass(frozen=True)
class StandInToolchain(Toolchain):
    """A toolchain whose torch headers are the stand-ins in ``stand_in`` (a folder outside every workspace): the
    compiles see ``-isystem <stand_in>`` where they would see torch's include folders, and the compiler sandbox shows
    that folder in their place (``cudagym.compiler_sandbox``); its compilers, torch's libraries (the links) and
    torch's version are the real toolchain's."""

    stand_in: Path

    @property
    def torch_includes(self) -> tuple[str, ...]:
        return (str(self.stand_in),)


def stand_in_headers(root: Path, types_h: str, extension_h: str, **more: str) -> Path:
    """The folder ``<root>/stand-in`` holding ``torch/types.h`` and ``torch/extension.h`` of the texts ``types_h`` and
    ``extension_h``, small headers that compile in a fraction of a second in place of torch's, and the headers of
    ``more`` (their path inside the folder: their text); the torch include folder of :class:`StandInToolchain`."""
    folder = root / "stand-in"
    for name, text in {"torch/types.h": types_h, "torch/extension.h": extension_h, **more}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def stand_in_builder(cache_dir: Path, stand_in: Path, options: BuildOptions) -> Builder:
    """A builder for :data:`NVCC_ONLY` whose compiles see the stand-in torch headers of the folder ``stand_in``
    (:func:`stand_in_headers`) in place of torch's."""
    real = find_toolchain()
    fields = {field.name: getattr(real, field.name) for field in dataclasses.fields(real)}
    toolchain = StandInToolchain(**fields, stand_in=stand_in)
    return Builder(NVCC_ONLY, cache_dir=cache_dir, options=options, toolchain=toolchain)


def stand_in_request(cuda: str, name: str) -> dict[str, Any]:
    """A load_inline request of the CUDA source ``cuda`` alone, without include paths: built by a
    :func:`stand_in_builder`, it sees the stand-in torch headers."""
    return {
        "loader": "load_inline",
        "name": name,
        "cpp_sources": [],
        "cuda_sources": [cuda],
        "functions": None,
        "with_pytorch_error_handling": True,
        "no_implicit_headers": True,
        "extra_cflags": [],
        "extra_cuda_cflags": ["-O3"],
        "extra_ldflags": [],
        "extra_include_paths": [],
        "with_cuda": True,
    }


def compiled(result: CompileResult) -> bool:
    """Compiled (the link of a CUDA extension fails where torch has no CUDA libraries: a compile is what counts)."""
    return result.status is Status.OK or result.message == "Linking failed."


class RewritingBuilder(Builder):
    """A builder whose workspace changes after a build's files were read and before its compilers run: what an
    environment does when its job was answered at the deadline while the stale build goes on (``rewrite``: the
    workspace, a file's path in it, its new text)."""

    rewrite: tuple[Workspace, str, str] | None = None

    def _compile_all(
        self, units: Sequence[CompileUnit], ws: Path, readonly: Sequence[Path] = ()
    ) -> list[tuple[int, str]]:
        if self.rewrite is not None:
            workspace, path, content = self.rewrite
            workspace.write(path, content)
        return super()._compile_all(units, ws, readonly)
