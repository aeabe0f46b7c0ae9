"""The cuda backend on a real GPU: reference solutions, wrong kernels, faults, side streams.

Run on the device machine: ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import relu_solution, write_all

from cudagym import sanitizer
from cudagym.backends import query_gpu, resolve_backend
from cudagym.baselines import solution_files, tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.gpu_lock import timing_slot
from cudagym.harness.timing import TimingConfig
from cudagym.tasks import load

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

BUILTIN = load("builtin")
WITH_CUDA_SOLUTION = [t.id for t in BUILTIN if "cuda" in t.solutions]
# CUDAGYM_TIER_SHARD="i/n": this process runs every n-th tier test from the i-th (parallel runs on the device,
# where the timing lock keeps the timed parts one at a time).
_SHARD = os.environ.get("CUDAGYM_TIER_SHARD", "0/1").split("/")
TIER_TASKS = WITH_CUDA_SOLUTION[int(_SHARD[0]) :: int(_SHARD[1])]
RELU = "builtin/relu"
GPU_CONFIG = EvalConfig(num_checks=2, verify_timeout=120, profile_timeout=300,
                        timing=TimingConfig(min_reps=10, max_reps=100, budget_seconds=0.5))  # fmt: skip
# The fault tests use the ReLU task at 4M elements: the faults do not need GPU-sized data, and the
# episodes that follow them stay short.
SMALL_RELU = dataclasses.replace(
    BUILTIN.get(RELU),
    metadata=dataclasses.replace(BUILTIN.get(RELU).metadata, sizes={"cuda": {"N": 1 << 22}}),
)


def relu_env_with_solution(config: EvalConfig) -> CudaKernelEnv:
    """An env on the small ReLU task with the reference CUDA solution written (the caller closes it)."""
    env = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=config)
    try:
        env.reset(options={"task_id": RELU})
        write_all(env, relu_solution("cuda"))
    except BaseException:
        env.close()
        raise
    return env


@contextlib.contextmanager
def timing_wanted_throughout(cache_dir: Path) -> Iterator[list[float]]:
    """Another env's timing, wanted again and again: a thread queues for the device's exclusive slot, holds it
    briefly and queues again, so that a timing waits at the turnstile whenever the env under test holds a shared
    slot. Yields the waits of the timings it got."""
    stop = threading.Event()
    waits: list[float] = []

    def want() -> None:
        while not stop.is_set():
            with timing_slot(resolve_backend("cuda"), cache_dir, timeout=600, label="another env's timing") as slot:
                waits.append(slot.waited_s)
                time.sleep(0.02)
            time.sleep(0.02)

    thread = threading.Thread(target=want, name="another-env-timing", daemon=True)
    thread.start()
    try:
        yield waits
    finally:
        stop.set()
        thread.join(timeout=600)


LAUNCHER = "void launch_relu(const float* x, float* y, int64_t n, cudaStream_t stream)"
KERNELS = {
    "illegal_address": f"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void k(const float* x, float* y, int64_t n) {{
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i + (1LL << 40)] = x[i];  // far outside any allocation
}}
{LAUNCHER} {{ k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n); }}
""",
    "misaligned": f"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void k(const float* x, float* y, int64_t n) {{
  // a 16-byte vector load from an address that is only 4-byte aligned (explicit PTX: no compiler split)
  const float* p = x + 1 + 4 * (blockIdx.x * (int64_t)blockDim.x + threadIdx.x);
  float a, b, c, d;
  asm volatile("ld.global.v4.f32 {{%0, %1, %2, %3}}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p));
  y[0] = a + b + c + d;
}}
{LAUNCHER} {{ k<<<1, 32, 0, stream>>>(x, y, n); }}
""",
    "launch_failure": f"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void k(const float* x, float* y, int64_t n) {{ }}
{LAUNCHER} {{ k<<<1, 4096, 0, stream>>>(x, y, n); }}  // more threads per block than the device allows
""",
    "device_assert": f"""#include <cuda_runtime.h>
#include <cassert>
#include <cstdint>
__global__ void k(const float* x, float* y, int64_t n) {{
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  assert(i < 0 && "device-side check failed");
}}
{LAUNCHER} {{ k<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n); }}
""",
    "endless_kernel": f"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void k(const float* x, float* y, int64_t n, int* flag) {{
  while (atomicAdd(flag, 0) == 0) {{ }}  // nobody ever sets the flag
}}
{LAUNCHER} {{
  int* flag; cudaMalloc(&flag, sizeof(int)); cudaMemset(flag, 0, sizeof(int));
  k<<<1, 32, 0, stream>>>(x, y, n, flag);
}}
""",
}
EXPECTED = {
    "illegal_address": ("illegal memory access", ("runtime_error", "crash")),
    "misaligned": ("misaligned address", ("runtime_error", "crash")),
    "launch_failure": ("relu kernel failed: invalid", ("runtime_error",)),  # CUDA 13 says "invalid argument"
    "device_assert": ("device-side assert", ("runtime_error", "crash")),
    "endless_kernel": ("a hung or runaway kernel", ("timeout",)),  # found by its call, long before verify_timeout
}


# the faults that are CUDA faults: the kind (``cudagym.harness.common.CUDA_ERROR_NAMES``) each must be named as
FAULT_KINDS = {
    "illegal_address": "illegal memory access",
    "misaligned": "misaligned address",
    "device_assert": "device-side assert",
}


def assert_fault_observation(obs: str, info: dict[str, Any], kind: str) -> None:
    """A CUDA fault's observation: what happened and what next first, the fault named with the build's only kernel,
    a few C++ frames at most, none of the profiler's warnings, no paths into the installation, a bounded size."""
    lines = obs.splitlines()
    assert lines[1].startswith("Next: "), obs
    fault = info["result"]["fault"]
    assert fault is not None and fault["kind"] == kind and fault["kernels"], info["result"]
    assert "CUDA fault: " in obs and "(the build's only kernel)" in obs and "kernel: k(" in obs, obs
    assert len([line for line in lines if line.lstrip().startswith(("frame #", "#"))]) <= 3, obs
    for noise in ("Profiler clears events", "site-packages", "<unknown function>", "CUDA_LAUNCH_BLOCKING"):
        assert noise not in obs, (noise, obs)
    assert len(obs) < 4000, obs


@pytest.mark.skipif(sanitizer.find_tool() is None, reason="compute-sanitizer is not installed")
def test_a_fault_is_located_by_compute_sanitizer_when_asked(tmp_path: Path) -> None:
    """Beside another env that wants to time all along: the sanitizer's run holds the device's shared slot, and its
    candidate must not queue for a second one behind that timing (which waits for the first: a hang to 120 s)."""
    config = dataclasses.replace(GPU_CONFIG, verify_timeout=60, fault_sanitizer=True)
    env = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=config)
    try:
        env.reset(options={"task_id": RELU})
        write_all(env, {**relu_solution("cuda"), "kernels/relu.cu": KERNELS["illegal_address"]})
        with timing_wanted_throughout(tmp_path) as waits:
            obs, _, _, _, info = env.step(tool_call("verify"))
        assert waits, "the other env's timing never ran"
        report = info["result"]["fault"]["sanitizer"]
        assert "compute-sanitizer" in obs and report, obs
        assert "Invalid __global__ write" in report and "k(" in report, report  # the access, the kernel
    finally:
        env.close()


@pytest.fixture(scope="module")
def env():
    environment = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=GPU_CONFIG)
    yield environment
    environment.close()


def test_compile_reports_ptxas_resources(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution("cuda"))
    obs, _, _, _, info = env.step(tool_call("compile"))
    assert info["status"] == "ok", obs
    assert "kernel resources (ptxas)" in obs and "relu_vec4_kernel" in obs
    assert any(k["registers"] > 0 for k in info["result"]["kernels"])


def test_wrong_kernel_gets_minus_one_with_the_mismatch(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    files = relu_solution("cuda")
    files["kernels/relu.cu"] = files["kernels/relu.cu"].replace("fmaxf(v, 0.0f)", "fmaxf(v, -0.5f)")
    write_all(env, files)
    obs, reward, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and reward == -1 and info["tier"] == -1
    assert "outside tolerance" in obs and "max abs error" in obs


def test_unwritten_outputs_fail_through_poisoning(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    files = relu_solution("cuda")
    files["kernels/relu.cu"] = files["kernels/relu.cu"].replace(
        "const int64_t n4 = aligned ? n / 4 : 0;", "n = n / 2; const int64_t n4 = aligned ? n / 4 : 0;"
    )
    write_all(env, files)
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] in ("mismatch", "invalid_output"), obs


@pytest.mark.parametrize("fault", list(KERNELS))
def test_gpu_faults_are_survived(fault: str) -> None:
    config = dataclasses.replace(GPU_CONFIG, verify_timeout=30)
    env = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=config)
    try:
        env.reset(options={"task_id": RELU})
        files = relu_solution("cuda")
        files["kernels/relu.cu"] = KERNELS[fault]
        write_all(env, files)
        start = time.monotonic()
        obs, reward, terminated, _, info = env.step(tool_call("verify"))
        seconds = time.monotonic() - start
        needle, statuses = EXPECTED[fault]
        assert info["status"] in statuses and needle in obs, obs
        assert not terminated and reward == 0
        assert seconds < 15, (fault, seconds)  # a fault, a hung kernel included, costs seconds, not verify_timeout
        if fault in FAULT_KINDS:  # what the agent is shown of a CUDA fault (issue 25)
            assert_fault_observation(obs, info, FAULT_KINDS[fault])
        # the same env completes a correct episode afterwards
        env.reset(options={"task_id": RELU})
        write_all(env, relu_solution("cuda"))
        _, reward, terminated, _, info = env.step(tool_call("submit"))
        assert terminated and info["tier"] >= 1, info["result"]["message"]
    finally:
        env.close()


def side_stream(joined: bool) -> str:
    """A relu that spins about 3 ms before writing its output, on a private stream; ``joined``: the private stream
    waits for the current one before it starts and the current stream for it before the call returns (a correct
    program: its inputs are written on the current stream), else the call says it is done with the work still
    running."""
    fork = (
        "  static cudaEvent_t ready = nullptr;\n"
        "  if (ready == nullptr) cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);\n"
        "  cudaEventRecord(ready, stream);\n"
        "  cudaStreamWaitEvent(side, ready, 0);\n"
        if joined
        else ""
    )
    join = (
        "  static cudaEvent_t done = nullptr;\n"
        "  if (done == nullptr) cudaEventCreateWithFlags(&done, cudaEventDisableTiming);\n"
        "  cudaEventRecord(done, side);\n"
        "  cudaStreamWaitEvent(stream, done, 0);\n"
        if joined
        else ""
    )
    return f"""#include <cuda_runtime.h>
#include <cstdint>
__global__ void slow_relu(const float* x, float* y, int64_t n) {{
  long long start = clock64();
  while (clock64() - start < 6000000LL) {{ }}  // about 3 ms at 1.98 GHz before any output is written
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = fmaxf(x[i], 0.0f);
}}
{LAUNCHER} {{
  static cudaStream_t side = nullptr;
  if (side == nullptr) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
{fork}  slow_relu<<<1024, 256, 0, side>>>(x, y, n);  // on a private stream
{join}}}
"""


@pytest.mark.parametrize("joined", [True, False])
def test_side_stream_work_is_timed_in_full_or_caught(env: CudaKernelEnv, joined: bool) -> None:
    env.reset(options={"task_id": RELU})
    files = relu_solution("cuda")
    files["kernels/relu.cu"] = side_stream(joined)
    write_all(env, files)
    obs, _, _, _, info = env.step(tool_call("profile"))
    if joined:
        assert info["status"] == "ok", obs
        assert info["result"]["candidate_ms"] >= 2.5, obs
    else:  # done said with the work still running: the output was sealed incomplete and differs when checked
        assert info["status"] == "mismatch", obs


LOAD_INLINE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"
relu_ext = load_inline(name="single_file_relu", cpp_sources=cpp_source, cuda_sources=cuda_source,
                       functions=["relu_forward"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_forward(x)
'''


def test_a_first_profile_takes_the_baselines_timed_ahead_and_no_timing_overlaps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference's torch.compile, begun ahead, runs its model on the device only in the shared slot. The reference
    is the candidate's clock, so a first profile waits for that compile (not as a phase of its own: inside the
    reference step) before its calibration; the baselines are timed ahead in a timing slot of their own, before or
    after the candidate's, never overlapping it, and the profile takes them."""
    from cudagym.gpu_lock import JOURNAL_ENV, exclusive_overlap_s, read_journal

    journal = tmp_path / "journal.jsonl"
    monkeypatch.setenv(JOURNAL_ENV, str(journal))
    # timing settings of this test alone: no baselines are cached under them, so the reference compiles
    timing = dataclasses.replace(GPU_CONFIG.timing, budget_seconds=0.5 + secrets.randbelow(10**6) * 1e-9)
    env = relu_env_with_solution(dataclasses.replace(GPU_CONFIG, timing=timing))
    try:
        assert env.step(tool_call("compile"))[4]["status"] == "ok"
        obs, _, _, _, info = env.step(tool_call("profile"))
        assert info["status"] == "ok", obs
        phases = dict(info["result"]["phases"])
        assert "reference_compile" not in phases
        marks = env.evaluator.ahead_marks
        entries = sorted(read_journal(journal), key=lambda entry: entry["acquired_at"])
        labels = [entry["label"] for entry in entries if entry["mode"] == "exclusive"]
        assert sorted(labels) == ["baselines", "calibration", "candidate"], (labels, marks, phases)
        assert labels.index("calibration") < labels.index("candidate"), labels
        assert exclusive_overlap_s(entries) == 0
        assert info["result"]["baseline_cached"]  # the profile took the baselines timed ahead
        assert marks["compiler_imported"] < marks["compile_done"] < marks["baselines_timed"]
    finally:
        env.close()


# the same with a template kernel launched through torch's dispatch macro (its float and double instances)
LOAD_INLINE_TEMPLATE = (
    LOAD_INLINE.replace(
        """__global__ void relu_kernel(const float* x, float* y, long n) {""",
        """template <typename scalar_t>
__global__ void relu_kernel(const scalar_t* x, scalar_t* y, long n) {""",
    )
    .replace(
        """  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);""",
        """  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "relu", ([&] {
    relu_kernel<scalar_t><<<(n + 255) / 256, 256>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
  }));""",
    )
    .replace("x[i] > 0.f ? x[i] : 0.f", "x[i] > scalar_t(0) ? x[i] : scalar_t(0)")  # no float mixed with Half
    .replace("single_file_relu", "single_file_template_relu")
)
# instantiated with torch's c10::Half too: the split's device unit includes c10/util/Half.h alone
LOAD_INLINE_TEMPLATE_HALF = LOAD_INLINE_TEMPLATE.replace(
    "AT_DISPATCH_FLOATING_TYPES(", "AT_DISPATCH_FLOATING_TYPES_AND_HALF("
).replace("single_file_template_relu", "single_file_template_half_relu")


@pytest.mark.parametrize(
    "source", [LOAD_INLINE, LOAD_INLINE_TEMPLATE, LOAD_INLINE_TEMPLATE_HALF], ids=["plain", "template", "half"]
)
def test_single_file_load_inline_solution(env: CudaKernelEnv, source: str) -> None:
    assert "<<<" in source and ("template" in source) == (source is not LOAD_INLINE)
    assert ("_AND_HALF" in source) == (source is LOAD_INLINE_TEMPLATE_HALF)
    env.reset(options={"task_id": RELU})
    assert env.step(tool_call("write_file", path="model_new.py", content=source))[4]["status"] == "ok"
    obs, _, _, _, info = env.step(tool_call("compile"))
    assert info["status"] == "ok", obs
    commands = info["result"]["commands"]  # none where every object was cached already
    # cuda.cu compiled as a device and a host unit (cudagym.kernel_split), which link and run correctly below
    assert not commands or any("split/cuda.cu" in command for command in commands), commands
    # main.cpp (a declaration and the bindings) against the binding headers, not all of torch's
    assert not commands or any("light/main.cpp" in command for command in commands), commands
    _, _, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and info["tier"] >= 1, info["result"]["message"]


def test_profile_with_ncu(env: CudaKernelEnv, tmp_path: Path) -> None:
    """Beside another env that wants to time all along: ncu's run takes turns with it (the device's shared slot)."""
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution("cuda"))
    with timing_wanted_throughout(tmp_path) as waits:
        obs, _, _, _, info = env.step(tool_call("profile", ncu=True))
    assert waits, "the other env's timing never ran"
    assert info["status"] == "ok", obs
    assert "relu_vec4_kernel" in info["result"]["ncu"], info["result"]["ncu"]
    assert "Throughput" in info["result"]["ncu"]


@pytest.fixture(scope="module")
def full_env():
    # the default timing settings: the baselines measured here are the ones benchmarks/cuda_solutions.py uses
    environment = CudaKernelEnv(backend="cuda", eval_config=dataclasses.replace(GPU_CONFIG, timing=TimingConfig()))
    yield environment
    environment.close()


@pytest.mark.parametrize("task_id", TIER_TASKS)
def test_cuda_reference_solution_reaches_its_expected_tier(full_env: CudaKernelEnv, task_id: str) -> None:
    full_env.reset(options={"task_id": task_id})
    write_all(full_env, solution_files(full_env.task, "cuda"))
    compiled = full_env.step(tool_call("compile"))[4]
    assert compiled["status"] == "ok", compiled["result"]["message"]
    _, _, terminated, _, info = full_env.step(tool_call("submit"))
    expected = BUILTIN.get(task_id).expected_tier("cuda", full_env.backend.device_name)
    result = info["result"]
    seconds = [f"{r['seconds']:.1f}" for r in (compiled["result"], result["verify"], result["profile"]) if r]
    print(
        f"TIER {task_id} {info['tier']} expected {expected} | compile/verify/profile s {'/'.join(seconds)} | "
        f"baseline cached {bool(result['profile'] and result['profile']['baseline_cached'])} | {result['message']}"
    )
    for stage in ("verify", "profile"):
        if result[stage]:
            print(f"PHASES {task_id} {stage} {result[stage]['phases']}")
    assert terminated and info["tier"] >= expected, f"{task_id}: tier {info['tier']} < {expected}"
