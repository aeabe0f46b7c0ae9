"""Faults in the agent's code come back as observations within the timeout; the env keeps working."""

from __future__ import annotations

import dataclasses
import time

import pytest
from cudagym_testing import RELU, relu_solution, write_all

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig

SEGFAULT = "\n".join(
    [
        "#include <cstdint>",
        "void relu_kernel(const float* x, float* y, int64_t n) {",
        "  volatile float* bad = nullptr;",
        "  for (int64_t i = 0; i < n; ++i) bad[i] = x[i];  // writes through a null pointer",
        "}",
    ]
)
INFINITE_LOOP = "\n".join(
    [
        "#include <cstdint>",
        "void relu_kernel(const float* x, float* y, int64_t n) {",
        "  volatile int64_t i = 0;",
        "  while (true) { i = i + 1; }  // never returns",
        "}",
    ]
)
ABORT = "\n".join(
    [
        "#include <cstdint>",
        "#include <cstdlib>",
        "void relu_kernel(const float* x, float* y, int64_t n) { std::abort(); }",
    ]
)
RAISES = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        raise ValueError('boom')\n"
BAD_IMPORT = "import torch\nimport does_not_exist\nclass ModelNew(torch.nn.Module):\n    pass\n"


@pytest.fixture
def short_env(fast_config: EvalConfig):
    config = dataclasses.replace(fast_config, verify_timeout=20, profile_timeout=20)
    env = CudaKernelEnv(backend="cpu", eval_config=config, max_turns=50)
    yield env
    env.close()


def finish_correct_episode(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution())
    _, reward, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and info["tier"] >= 1 and reward >= 1, info


@pytest.mark.parametrize(
    ("kernel", "status", "needle"),
    [
        (SEGFAULT, "crash", "SIGSEGV"),
        (ABORT, "crash", "SIGABRT"),
        (INFINITE_LOOP, "timeout", "did not finish within 20 s"),
    ],
    ids=["segfault", "abort", "infinite-loop"],
)
def test_native_faults_are_observations(short_env: CudaKernelEnv, kernel: str, status: str, needle: str) -> None:
    short_env.reset(options={"task_id": RELU})
    files = relu_solution()
    files["kernels/relu.cpp"] = kernel
    write_all(short_env, files)
    assert short_env.step(tool_call("compile"))[4]["status"] == "ok"
    start = time.monotonic()
    obs, reward, terminated, _truncated, info = short_env.step(tool_call("verify"))
    assert time.monotonic() - start < 20 + 15
    assert info["status"] == status and needle in obs
    assert not terminated and reward == 0
    finish_correct_episode(short_env)


@pytest.mark.parametrize(
    ("model_new", "status", "needle"),
    [
        (RAISES, "runtime_error", "ValueError while running ModelNew: boom"),
        (BAD_IMPORT, "load_error", "ModuleNotFoundError while loading"),
    ],
    ids=["raises", "bad-import"],
)
def test_python_errors_are_observations(short_env: CudaKernelEnv, model_new: str, status: str, needle: str) -> None:
    short_env.reset(options={"task_id": RELU})
    files = relu_solution()
    files["model_new.py"] = model_new
    write_all(short_env, files)
    obs, _, _, _, info = short_env.step(tool_call("verify"))
    assert info["status"] == status and needle in obs
    assert "Traceback" in obs
    finish_correct_episode(short_env)


LIMITS_PROBE = (
    "import resource, torch\n"
    "class ModelNew(torch.nn.Module):\n"
    "    def forward(self, x):\n"
    "        limits = {n: resource.getrlimit(getattr(resource, n)) for n in ('RLIMIT_NOFILE', 'RLIMIT_CORE')}\n"
    "        raise ValueError(f'limits={limits}')\n"
)


def test_candidate_runs_under_rlimits(short_env: CudaKernelEnv) -> None:
    short_env.reset(options={"task_id": RELU})
    files = relu_solution()
    files["model_new.py"] = LIMITS_PROBE
    write_all(short_env, files)
    obs, _, _, _, info = short_env.step(tool_call("verify"))
    assert info["status"] == "runtime_error"
    assert "'RLIMIT_NOFILE': (1024, 1024)" in obs and "'RLIMIT_CORE': (0, 0)" in obs
