"""The backend-dependent defaults of ``EvalConfig`` and the timing settings the children get
(cudagym/eval_config.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cudagym.backends import Backend, resolve_backend
from cudagym.eval_config import EvalConfig, resolve_hang_seconds, resolve_timing

CUDA = Backend("cuda", "cuda", "a GPU", "sm_90", 0)  # a stand-in: what the functions read of a cuda backend


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_timing_names_the_gpu_library_on_cuda_and_fails_loudly_when_it_cannot_be_built(tmp_path: Path) -> None:
    timing = resolve_timing(EvalConfig().timing, CUDA, tmp_path, shutil.which("nvcc"))
    assert Path(timing.gpu_library).is_file() and timing.gpu_library.startswith(str(tmp_path / "gpulib"))
    again = resolve_timing(EvalConfig().timing, CUDA, tmp_path, shutil.which("nvcc"))
    assert again.gpu_library == timing.gpu_library  # built once per cache directory
    assert resolve_timing(EvalConfig().timing, resolve_backend("cpu"), tmp_path, "nvcc").gpu_library == ""
    with pytest.raises(RuntimeError, match="GPU library could not be built"):  # the trusted clock needs it
        resolve_timing(EvalConfig().timing, CUDA, tmp_path / "other", str(tmp_path / "no-nvcc"))


def test_a_timing_that_names_its_library_is_sent_as_it_is(tmp_path: Path) -> None:
    import dataclasses

    named = dataclasses.replace(EvalConfig().timing, gpu_library="/somewhere/gpulib.so")
    assert resolve_timing(named, CUDA, tmp_path, "no-nvcc") is named
    assert not (tmp_path / "gpulib").exists()


def test_the_hang_floor_is_a_few_seconds_on_cuda_more_on_cpu_and_a_number_replaces_it() -> None:
    cpu = resolve_backend("cpu")
    assert resolve_hang_seconds(EvalConfig(), CUDA) == 5.0
    assert resolve_hang_seconds(EvalConfig(), cpu) == 20.0
    assert resolve_hang_seconds(EvalConfig(hang_seconds=2), CUDA) == 2.0
    for bad in (0, -1.0, True, "soon"):
        with pytest.raises(ValueError, match="hang_seconds"):
            EvalConfig(hang_seconds=bad)  # type: ignore[arg-type]
