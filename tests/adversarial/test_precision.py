"""Precision as an explicit policy, on the CPU backend through the real environment (write_file, then verify).

An fp32 task's outputs are held to a float64 twin of the reference within what fp32 arithmetic meets
(``cudagym/harness/compare.py``): a GEMM whose operands are cut to TF32 (10 mantissa bits) or bf16 passes the task's
tolerance but fails that bound, unless the policy allows TF32 (``gemm_bias_relu``'s task.toml does, for its TF32 CUDA
solution; ``honor_task_hints=False`` takes that away); the built-in solution passes with margin. Inputs of
1e2-1e3 ("large", where the task allows) stop a softmax without the max subtraction, which every other input set lets
through. A bf16 track judges a bf16 kernel by the task's tolerance against the bf16 reference.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import write_all

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.tasks import load

GEMM = "builtin/gemm_bias_relu"  # its task.toml allows TF32 (its CUDA solution uses TF32 tensor cores)
SOFTMAX = "builtin/softmax"
TF32_MASK = "0xFFFFE000u"  # the 10 explicit mantissa bits a TF32 tensor core reads of an fp32 operand
BF16_MASK = "0xFFFF0000u"  # the 7 of bf16

# relu(x @ W^T + b) through the built-in kernel, on copies of x and W whose low mantissa bits are cleared
CUT_GEMM_BINDING = """#include "binding_registry.h"

#include <cstdint>
#include <cstring>

void gemm_bias_relu_kernel(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t k, int64_t n);

// A copy of x with every element's bits masked: fewer mantissa bits, as a reduced-precision unit reads it.
static torch::Tensor cut(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* src = x.data_ptr<float>();
  float* dst = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof(bits));
    bits &= MASK;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
  return y;
}

torch::Tensor gemm_bias_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  auto cx = cut(x.contiguous()), cw = cut(weight.contiguous());
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  auto y = torch::empty({m, n}, x.options());
  gemm_bias_relu_kernel(cx.data_ptr<float>(), cw.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), m, k,
                        n);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("gemm_bias_relu_forward", &gemm_bias_relu_forward, "relu(x @ W^T + b) on cut operands (CPU)");
}
REGISTER_BINDING(gemm_bias_relu, bind);
"""

# softmax as exp(x) / sum(exp(x)): right for small inputs, overflows (inf / inf) once x passes 88
NAIVE_SOFTMAX = """#include <cmath>
#include <cstdint>

void softmax_kernel(const float* __restrict x, float* __restrict y, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float s = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      yr[i] = std::exp(xr[i]);
      s += yr[i];
    }
    for (int64_t i = 0; i < d; ++i) yr[i] /= s;
  }
}
"""

# ReLU on bf16 bits: a negative value (sign bit set) becomes +0, the rest is copied
BF16_RELU_BINDING = """#include "binding_registry.h"

#include <cstdint>

torch::Tensor relu_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kBFloat16, "x must be contiguous bfloat16");
  auto y = torch::empty_like(x);
  const uint16_t* src = static_cast<const uint16_t*>(x.data_ptr());
  uint16_t* dst = static_cast<uint16_t*>(y.data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = (src[i] & 0x8000u) ? 0 : src[i];
  return y;
}

static void bind(pybind11::module_& m) { m.def("relu_forward", &relu_forward, "ReLU on bf16 (CPU)"); }
REGISTER_BINDING(relu, bind);
"""


def solution(task_id: str, task_set: Any = None) -> dict[str, str]:
    """The built-in CPU solution of ``task_id``, by workspace path."""
    root = Path((task_set or load("builtin")).get(task_id).solutions["cpu"])
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def cut_gemm(mask: str) -> dict[str, str]:
    files = solution(GEMM)
    files["kernels/gemm_bias_relu_binding.cpp"] = CUT_GEMM_BINDING.replace("MASK", mask)
    return files


def naive_softmax() -> dict[str, str]:
    files = solution(SOFTMAX)
    files["kernels/softmax.cpp"] = NAIVE_SOFTMAX
    return files


def verify(env: CudaKernelEnv, task_id: str, files: dict[str, str]) -> dict[str, Any]:
    """Writes ``files`` into a fresh episode on ``task_id`` and verifies; the verify result (as in ``info``)."""
    env.reset(options={"task_id": task_id})
    write_all(env, files)
    _, _, _, _, info = env.step(tool_call("verify"))
    return info["result"]


def precision_finding(result: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in result["integrity"] if f["check"] == "precision")


def _env(config: EvalConfig, **options: Any):
    environment = CudaKernelEnv(backend="cpu", eval_config=config, **options)
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def env(fast_config: EvalConfig):
    """The default policy, with the task set's hints: fp32 tasks held to the float64 bound of fp32 arithmetic (TF32's
    where the task allows it); three checks (task, normal, and large inputs where the task allows them)."""
    yield from _env(fast_config)


@pytest.fixture(scope="module")
def strict_env(fast_config: EvalConfig):
    """The default policy without the task set's hints: no task allows TF32."""
    yield from _env(dataclasses.replace(fast_config, policy=IntegrityPolicy(honor_task_hints=False)))


@pytest.mark.parametrize("mask", [TF32_MASK, BF16_MASK], ids=["tf32", "bf16"])
def test_a_reduced_precision_gemm_fails_an_fp32_task(strict_env: CudaKernelEnv, mask: str) -> None:
    result = verify(strict_env, GEMM, cut_gemm(mask))
    assert result["status"] == "mismatch", result["message"]
    assert "less precise than fp32 arithmetic allows" in result["message"], result["message"]
    assert "TF32 or bf16 arithmetic is not allowed" in result["message"]
    assert result["checks"][-1]["precision_ratio"] > 4  # measured 53 (TF32) and 394 (bf16)
    assert not precision_finding(result)["passed"]


def test_the_built_in_gemm_passes_the_fp32_bound_with_margin(strict_env: CudaKernelEnv) -> None:
    result = verify(strict_env, GEMM, solution(GEMM))
    assert result["status"] == "ok", result["message"]
    assert all(c["precision_ratio"] < 0.5 for c in result["checks"]), result["checks"]  # measured 0.08-0.10
    finding = precision_finding(result)
    assert finding["passed"] and finding["detail"].startswith("fp32 (fp64 reference)"), finding


def test_tf32_passes_where_the_task_allows_it(env: CudaKernelEnv) -> None:
    result = verify(env, GEMM, cut_gemm(TF32_MASK))
    assert result["status"] == "ok", result["message"]
    finding = precision_finding(result)
    assert finding["passed"] and finding["detail"].startswith("tf32 allowed"), finding


def test_a_softmax_without_the_max_subtraction_fails_on_large_inputs(env: CudaKernelEnv) -> None:
    result = verify(env, SOFTMAX, naive_softmax())
    assert result["status"] == "mismatch", result["message"]
    assert "check 3 of 3" in result["message"] and "NaN/Inf" in result["message"], result["message"]
    assert [c["passed"] for c in result["checks"]] == [True, True, False]  # task and normal inputs let it through


def test_the_built_in_softmax_passes_on_large_inputs(env: CudaKernelEnv) -> None:
    result = verify(env, SOFTMAX, solution(SOFTMAX))
    assert result["status"] == "ok", result["message"]
    assert len(result["checks"]) == 4 and all(c["precision_ratio"] < 0.5 for c in result["checks"])  # measured 0.10


def test_a_bf16_track_judges_a_bf16_kernel_by_the_tolerance(fast_config: EvalConfig) -> None:
    task_id = "builtin/relu@bf16"
    for environment in _env(fast_config, task_set="builtin", precision="bf16", ids=[task_id]):
        fp32 = verify(environment, task_id, solution("builtin/relu"))
        assert fp32["status"] != "ok" and "float32" in fp32["message"], fp32["message"]
        files = solution("builtin/relu")
        files["kernels/relu_binding.cpp"] = BF16_RELU_BINDING
        files.pop("kernels/relu.cpp")
        result = verify(environment, task_id, files)
        assert result["status"] == "ok", result["message"]
        assert all(c["precision_ratio"] is None for c in result["checks"])
        assert precision_finding(result)["detail"] == "bf16: the task's tolerance alone (a bfloat16 reference)"
