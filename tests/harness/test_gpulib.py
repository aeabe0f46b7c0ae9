"""The hold kernel's build (cudagym/harness/hold.py): nvcc runs here too, so it is tested without a GPU; what the
kernel does on the device is in tests/gpu/test_gpu_timing.py."""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from cudagym.harness import gpulib

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def test_the_gpu_library_is_built_once_per_architecture_and_source(tmp_path: Path) -> None:
    built = gpulib.build(tmp_path, "sm_90")
    assert built.name == gpulib.library_name("sm_90") and built.stat().st_size > 0
    stamp = built.stat().st_mtime_ns
    assert gpulib.build(tmp_path, "sm_90") == built and built.stat().st_mtime_ns == stamp  # found, not rebuilt
    assert gpulib.library_name("sm_80") != built.name
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no half-built leftovers
    library = ctypes.CDLL(str(built))  # loads without a GPU: CUDA starts at the first launch
    assert hasattr(library, "cudagym_hold") and hasattr(library, "cudagym_hash")


def test_a_failed_build_says_why_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpulib, "SOURCE", gpulib.SOURCE + "\nthis is not C++;\n")
    with pytest.raises(RuntimeError, match="building the GPU library failed"):
        gpulib.build(tmp_path, "sm_90")
    assert list(tmp_path.iterdir()) == []
