"""The judgement of run-time observations (``cudagym.integrity.runtime``), on made-up observations.

The end-to-end fixtures (a real env, a hacked solution, tier -1) are in tests/adversarial/; these pin
down the rules themselves, including the GPU-only ones (own kernels, roofline) that CI cannot run.
"""

from __future__ import annotations

import dataclasses

from cudagym.harness.protocol import Samples
from cudagym.integrity import runtime
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.results import KernelTime

DEFAULT = IntegrityPolicy()


def test_allocation_views_and_their_decomposed_forms_are_not_compute() -> None:
    ops = ["aten::empty.memory_format", "aten::zero_", "aten::clone", "aten::view", "aten::copy_", "aten::fill_"]
    assert runtime.torch_compute(ops, DEFAULT).passed


def test_compute_ops_fail_and_are_named() -> None:
    finding = runtime.torch_compute(["aten::empty_like", "aten::relu", "aten::add.Tensor"], DEFAULT)
    assert not finding.passed and "add" in finding.detail and "relu" in finding.detail


def test_gemm_is_allowed_only_with_cublas() -> None:
    assert not runtime.torch_compute(["aten::mm"], DEFAULT).passed
    assert runtime.torch_compute(["aten::mm"], DEFAULT.replace(allow_cublas=True)).passed
    assert not runtime.torch_compute(["aten::relu"], DEFAULT.replace(allow_cublas=True)).passed


def test_a_denied_data_op_fails() -> None:
    assert not runtime.torch_compute(["aten::clone"], DEFAULT.extended(deny=["aten::clone"])).passed


def test_unobserved_stages_pass_and_say_so() -> None:
    finding = runtime.torch_compute(None, DEFAULT)
    assert finding.passed and "not observed" in finding.detail


KERNEL = {"calls": 1, "total_ms": 1.0}


def rows(*named: tuple[str, float]) -> list[KernelTime]:
    return [KernelTime(name=name, share=share, **KERNEL) for name, share in named]


def test_own_kernels_must_do_the_work_on_the_gpu() -> None:
    own = rows(("relu_vec4_kernel(float4 const*, float4*, long)", 0.95), ("void at::native::FillFunctor", 0.05))
    assert runtime.own_kernels(own, True, DEFAULT).passed
    decoy = rows(("void at::native::vectorized_elementwise_kernel<4, at::native::clamp_min>", 1.0))
    assert "none of the GPU time" in runtime.own_kernels(decoy, True, DEFAULT).detail
    mostly_torch = rows(("my_kernel(float*)", 0.3), ("void at::native::reduce_kernel<512, 1>", 0.7))
    assert not runtime.own_kernels(mostly_torch, True, DEFAULT).passed
    cublas = rows(("my_epilogue(float*)", 0.2), ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", 0.8))
    assert not runtime.own_kernels(cublas, True, DEFAULT).passed
    assert runtime.own_kernels(cublas, True, DEFAULT.replace(allow_cublas=True)).passed


def test_own_kernels_is_not_judged_on_the_cpu() -> None:
    assert runtime.own_kernels(rows(("aten::relu", 1.0)), False, DEFAULT).passed


def test_a_time_below_the_memory_floor_fails() -> None:
    moved, peak = 4 * 1024**3, 4.8e12  # 4 GiB at 4.8 TB/s: 0.89 ms floor
    assert runtime.within_roofline(1.0, moved, peak).passed
    assert not runtime.within_roofline(0.2, moved, peak).passed
    assert runtime.within_roofline(0.2, moved, None).passed  # no bound known (cpu)


def test_first_failure_and_simple_rules() -> None:
    assert not runtime.inputs_unchanged(False, None).passed
    assert not runtime.inputs_unchanged(None, [1]).passed
    assert runtime.inputs_unchanged(True, None).passed
    assert not runtime.no_aliasing(True).passed and runtime.no_aliasing(False).passed
    assert not runtime.trusted_functions(["time.perf_counter"]).passed
    assert not runtime.no_threads(2).passed and runtime.no_threads(0).passed
    assert not runtime.deterministic(False).passed and runtime.deterministic(None).passed
    findings = [runtime.no_threads(0), runtime.deterministic(False), runtime.no_threads(1)]
    assert runtime.first_failure(findings).check == "deterministic"


def test_the_sampled_share_of_torch_compute_fails_above_the_limit_and_blas_only_where_allowed() -> None:
    own = Samples(observed=True, own=900, library=120, runtime=50, library_compute=20, library_blas=0)
    assert runtime.sampled_own_code(own, DEFAULT).passed
    aten = dataclasses.replace(own, own=10, library_compute=400)
    assert not runtime.sampled_own_code(aten, DEFAULT).passed
    assert runtime.sampled_own_code(aten, DEFAULT.replace(allow_torch_compute=True)).passed
    gemm = dataclasses.replace(aten, library_blas=400)
    assert not runtime.sampled_own_code(gemm, DEFAULT).passed
    assert runtime.sampled_own_code(gemm, DEFAULT.replace(allow_cublas=True)).passed
    too_few = dataclasses.replace(aten, own=1, library_compute=5)
    assert runtime.sampled_own_code(too_few, DEFAULT).passed
    unseen = runtime.sampled_own_code(Samples(observed=False, why="perf_event_open: Permission denied"), DEFAULT)
    assert unseen.passed and "Permission denied" in unseen.detail


def test_a_share_just_above_the_limit_on_few_samples_decides_nothing_but_a_clear_one_fails() -> None:
    # a small honest call: three stray samples of torch's glue among 27 is noise, not torch computing the answer
    noisy = Samples(observed=True, own=24, library=3, runtime=800, library_compute=3, library_blas=0)
    assert runtime.sampled_own_code(noisy, DEFAULT).passed
    # an offload of a third of the work, seen over many samples, is caught
    offload = dataclasses.replace(noisy, own=200, library_compute=100)
    assert not runtime.sampled_own_code(offload, DEFAULT).passed
    assert runtime.share_lower_bound(3, 27) < runtime.MAX_LIBRARY_SHARE < runtime.share_lower_bound(100, 300)
    assert runtime.share_lower_bound(0, 0) == 0.0
