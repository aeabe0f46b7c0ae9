"""The backend-dependent defaults of ``EvalConfig`` and the timing settings the children get
(cudagym/eval_config.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cudagym.backends import Backend, resolve_backend
from cudagym.eval_config import EvalConfig, preloads_compiler, resolve_timing

CUDA = Backend("cuda", "cuda", "a GPU", "sm_90", 0)  # a stand-in: what the functions read of a cuda backend


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_timing_holds_the_gpu_on_cuda_and_says_so_when_the_hold_cannot_be_built(tmp_path: Path) -> None:
    timing = resolve_timing(EvalConfig().timing, CUDA, tmp_path, shutil.which("nvcc"))
    assert Path(timing.hold_library).is_file() and timing.hold_library.startswith(str(tmp_path / "hold"))
    again = resolve_timing(EvalConfig().timing, CUDA, tmp_path, shutil.which("nvcc"))
    assert again.hold_library == timing.hold_library  # built once per cache directory
    assert resolve_timing(EvalConfig().timing, resolve_backend("cpu"), tmp_path, "nvcc").hold_library == ""
    with pytest.warns(RuntimeWarning, match="without the GPU hold"):
        assert resolve_timing(EvalConfig().timing, CUDA, tmp_path / "other", str(tmp_path / "no-nvcc")) == (
            EvalConfig().timing
        )


def test_a_timing_that_names_its_hold_or_holds_nothing_is_sent_as_it_is(tmp_path: Path) -> None:
    import dataclasses

    named = dataclasses.replace(EvalConfig().timing, hold_library="/somewhere/hold.so")
    assert resolve_timing(named, CUDA, tmp_path, "no-nvcc") is named
    off = dataclasses.replace(EvalConfig().timing, hold_us=0.0)
    assert resolve_timing(off, CUDA, tmp_path, "no-nvcc") is off
    assert not (tmp_path / "hold").exists()


def test_the_compiler_is_preloaded_when_preparing_ahead_with_the_compile_baseline() -> None:
    cpu = resolve_backend("cpu")
    assert preloads_compiler(EvalConfig(), CUDA)  # auto: cuda prepares ahead
    assert not preloads_compiler(EvalConfig(), cpu)  # auto: cpu does not (the agent's compiles need the cores)
    assert preloads_compiler(EvalConfig(prepare_ahead=True), cpu)
    assert preloads_compiler(EvalConfig(preload_compiler=True), cpu)
    assert not preloads_compiler(EvalConfig(preload_compiler=False), CUDA)
    assert not preloads_compiler(EvalConfig(compile_baseline=False, preload_compiler=True), CUDA)  # nothing to build
