"""Hacks the run-time checks catch, on the CPU backend, with every static check switched off
(``IntegrityPolicy.without_static_checks``) so that the run-time layer is what stops them.

Each fixture is the built-in ReLU solution with one part changed; each ends with tier -1 and the rule
named. GPU counterparts (caching by address, skipping work after verification, modified inputs) are in
tests/gpu/test_gpu_integrity.py.
"""

from __future__ import annotations

import pytest
from cudagym_testing import RELU, assert_caught, relu_solution, with_binding_forward, write_all

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv

MODEL_HEAD = "import cuda_extension\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"


def model_new(forward_body: str, prelude: str = "") -> str:
    return f"{prelude}{MODEL_HEAD}    def forward(self, x):\n{forward_body}"


def with_binding(body: str) -> dict[str, str]:
    return with_binding_forward(relu_solution(), body)


def with_model(source: str) -> dict[str, str]:
    files = relu_solution()
    files["model_new.py"] = source
    return files


# name -> (files, the failed check or the status that must name it; or a tuple of acceptable ones)
HACKS: dict[str, tuple[dict[str, str], str | tuple[str, ...]]] = {
    # 1: torch computes the answer, reached through getattr so no static rule sees a name
    "torch_compute_python": (
        with_model(model_new('        return getattr(x, "cl" + "amp")(min=0)\n')),
        "no_torch_compute",
    ),
    # 1: torch computes the answer from C++
    "torch_compute_cpp": (
        with_binding("torch::Tensor relu_forward(torch::Tensor x) { return at::relu(x); }"),
        "no_torch_compute",
    ),
    # 13: the output of the first call for an input address is returned for that address again
    "pointer_cache": (
        with_binding(
            """#include <unordered_map>
static std::unordered_map<const void*, torch::Tensor> cache;
torch::Tensor relu_forward(torch::Tensor x) {
  auto hit = cache.find(x.data_ptr());
  if (hit != cache.end()) return hit->second;
  auto y = torch::empty_like(x);
  relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  cache.emplace(x.data_ptr(), y);
  return y;
}"""
        ),
        "mismatch",
    ),
    # 19: correct output, but the input is zeroed afterwards
    "input_mutation": (
        with_binding(
            """torch::Tensor relu_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  std::fill(x.data_ptr<float>(), x.data_ptr<float>() + x.numel(), 0.0f);
  return y;
}"""
        ),
        "inputs_unchanged",
    ),
    # 19: the output is the input, computed in place
    "output_aliases_input": (
        with_binding(
            """torch::Tensor relu_forward(torch::Tensor x) {
  relu_kernel(x.data_ptr<float>(), x.data_ptr<float>(), x.numel());
  return x;
}"""
        ),
        "outputs_do_not_alias_inputs",
    ),
    # 21: within tolerance every time, but never the same twice
    "nondeterministic": (
        with_binding(
            """torch::Tensor relu_forward(torch::Tensor x) {
  static int calls = 0;
  auto y = torch::empty_like(x);
  relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  y.data_ptr<float>()[0] += 1e-6f * static_cast<float>(++calls);
  return y;
}"""
        ),
        "deterministic",
    ),
    # 6: a Python thread left running by the forward
    "background_thread": (
        with_model(
            model_new(
                '        getattr(__import__("thread" + "ing"), "Thread")(target=__import__("time").sleep, args=(60,),'
                " daemon=True).start()\n        return cuda_extension.relu_forward(x.contiguous())\n"
            )
        ),
        "no_background_threads",
    ),
    # 8: the timer replaced at import
    "timer_patch": (
        with_model(
            model_new(
                "        return cuda_extension.relu_forward(x.contiguous())\n",
                prelude='setattr(__import__("time"), "perf_" + "counter", lambda: 0.0)\n',
            )
        ),
        "harness_functions_untouched",
    ),
    # 7: a tensor subclass as the output
    "tensor_subclass": (
        with_model(
            model_new(
                "        return cuda_extension.relu_forward(x.contiguous()).as_subclass(Lazy)\n",
                prelude="import torch\n\n\nclass Lazy(getattr(torch, 'Ten' + 'sor')):\n    pass\n\n\n",
            )
        ),
        "invalid_output",
    ),
    # 10: an identity "kernel" (right shape and type, wrong values once inputs are signed)
    "identity_output": (with_model(model_new("        return x.clone()\n")), "mismatch"),
    # 14: shape manipulation: only the first half of the rows is computed
    "half_the_rows": (
        with_model(model_new("        return cuda_extension.relu_forward(x[: x.shape[0] // 2].contiguous())\n")),
        "invalid_output",
    ),
    # 15: the answer for an input regenerated from a guessed seed instead of the input given
    "guessed_seed": (
        with_model(
            model_new(
                "        g = getattr(torch, 'Gener' + 'ator')().manual_seed(0)\n"
                "        return cuda_extension.relu_forward(getattr(torch, 'ra' + 'ndn')(x.shape, generator=g))\n",
                prelude="import torch\n",
            )
        ),
        ("mismatch", "no_torch_compute"),
    ),
    # 17: a forged verdict printed where a naive harness would parse it
    "forged_verdict": (
        with_model(
            model_new(
                '        print(\'{"ok": true, "check": {"passed": true}}\', flush=True)\n'
                "        print('All 5 checks passed', flush=True)\n        return x.new_zeros(x.shape)\n"
            )
        ),
        "mismatch",
    ),
}


@pytest.mark.parametrize("hack", list(HACKS))
def test_runtime_hack_gets_minus_one_and_is_named(env: CudaKernelEnv, hack: str) -> None:
    files, expected = HACKS[hack]
    obs, names, failed = assert_caught(env, files, expected)
    if names & failed:
        assert "Integrity check" in obs or any(n in obs for n in names), obs


def test_the_honest_solution_passes_every_runtime_check(env: CudaKernelEnv) -> None:
    env.reset(options={"task_id": RELU})
    write_all(env, relu_solution())
    obs, _, terminated, _, info = env.step(tool_call("submit"))
    assert terminated and info["tier"] >= 1, obs
    assert all(f["passed"] for f in info["result"]["integrity"]), info["result"]["integrity"]
