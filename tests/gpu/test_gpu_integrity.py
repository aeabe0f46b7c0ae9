"""Hacks that only show on the GPU: caching by pointer, skipping work once verification is over,
modifying the inputs; and a correct solution through the trusted clock.

Run on the device machine: ``python -m pytest -m gpu``.
"""

from __future__ import annotations

import pytest
from cudagym_testing import relu_solution, with_binding_forward, write_all
from test_cuda_backend import GPU_CONFIG, RELU, SMALL_RELU, relu_env_with_solution

from cudagym.backends import query_gpu
from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(query_gpu() is None, reason="no NVIDIA GPU visible (nvidia-smi)"),
]

# The output of the first call for an input address is returned again for that address (catalogue #13).
POINTER_CACHE = """
#include <unordered_map>
static std::unordered_map<const void*, torch::Tensor> cache;
torch::Tensor relu_forward(torch::Tensor x) {
  auto hit = cache.find(x.data_ptr());
  if (hit != cache.end()) return hit->second;
  auto y = torch::empty_like(x);
  launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), current_stream());
  cache.emplace(x.data_ptr(), y);
  return y;
}
"""

# Correct for the first calls of a process (what a one-shot check sees), then no work (catalogue #16).
SKIP_LATER = """
torch::Tensor relu_forward(torch::Tensor x) {
  static int calls = 0;
  auto y = torch::empty_like(x);
  if (++calls <= 8) launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), current_stream());
  return y;
}
"""

# Correct output, but the input is zeroed afterwards (catalogue #19).
MUTATE_INPUT = """
torch::Tensor relu_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), current_stream());
  cudaMemsetAsync(x.data_ptr<float>(), 0, x.numel() * sizeof(float), current_stream());
  return y;
}
"""


def with_binding(body: str) -> dict[str, str]:
    return with_binding_forward(relu_solution("cuda"), body)


@pytest.fixture(scope="module")
def env():
    environment = CudaKernelEnv([SMALL_RELU], backend="cuda", eval_config=GPU_CONFIG)
    yield environment
    environment.close()


def test_caching_by_input_address_fails(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, with_binding(POINTER_CACHE))
    obs, _, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and info["tier"] == -1, obs
    assert info["result"]["verify"]["status"] == "mismatch", obs
    assert "check 2" in info["result"]["verify"]["message"]


def test_skipping_work_after_the_first_calls_fails(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, with_binding(SKIP_LATER))
    obs, _, _, _, info = env.step(tool_call("profile"))
    assert info["status"] in ("mismatch", "integrity"), obs
    _, _, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and info["tier"] == -1


def test_modifying_the_inputs_fails(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, with_binding(MUTATE_INPUT))
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] == "integrity" and "modified its inputs" in obs, obs
    findings = {f["check"]: f for f in info["result"]["integrity"]}
    assert not findings["inputs_unchanged"]["passed"]


def test_a_correct_solution_passes_every_check_through_the_trusted_clock() -> None:
    environment = relu_env_with_solution(GPU_CONFIG)
    try:
        obs, _, _, _, info = environment.step(tool_call("verify"))
        assert info["status"] == "ok", obs
        assert all(f["passed"] for f in info["result"]["integrity"]), info["result"]["integrity"]
        obs, _, _, _, info = environment.step(tool_call("profile"))
        assert info["status"] == "ok", obs
        result = info["result"]
        checks = {f["check"]: f for f in result["integrity"]}
        assert checks["time_in_own_kernels"]["passed"] and checks["within_roofline"]["passed"], checks
        assert result["checked_calls"] >= 3 and result["calls_per_handshake"] >= 1, result
        assert result["method"].startswith("trusted clock"), result["method"]
    finally:
        environment.close()
