"""A kernel that holds every SM of the GPU for a set time: the timed interval's head start.

The CUDA timing brackets each call with events and ends it after a full device synchronisation. With an idle
GPU at the start event, the interval also holds the host's own path into the call (Python, the dispatcher, the
launch), which a busy host stretches by tens of microseconds (docs/benchmarks.md, repeatability). Launching this
kernel just before the start event keeps the GPU busy while the host records the event and enqueues the call, so
the call's first kernel is already queued when the start event fires.

It takes every thread slot of every SM (``GpuHold.blocks`` blocks of ``GpuHold.threads`` threads), so no kernel of
another stream can run beside it: work a call launches on a side stream waits for it as the call's own stream
does, and is timed. Copy engines are not SMs: an asynchronous copy on a side stream can overlap it, for at most
the hold's length.

Kept free of cudagym imports (the timing children import it by path); ``build`` needs ``nvcc``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

SOURCE = r"""
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// each block spins from its own start until ns have passed: the blocks start together, since the grid fits
__global__ void __launch_bounds__(1024) cudagym_hold_every_sm(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
}

extern "C" int cudagym_hold(void* stream, unsigned long long ns, int blocks, int threads) {
  cudagym_hold_every_sm<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(ns);
  return static_cast<int>(cudaGetLastError());
}
"""


def library_name(arch: str) -> str:
    """The built library's file name: the source's hash and the architecture, so a changed source rebuilds."""
    digest = hashlib.sha256(f"{SOURCE}\0{arch}".encode()).hexdigest()[:16]
    return f"cudagym_hold_{arch}_{digest}.so"


def build(folder: Path, arch: str, nvcc: str = "nvcc", timeout: float = 120.0) -> Path:
    """Builds the hold library for ``arch`` (e.g. ``sm_90``) into ``folder`` unless it is there already; returns
    its path. The file appears whole or not at all (built beside it, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / library_name(arch)
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=folder, prefix=".hold-") as tmp:
        source = Path(tmp) / "hold.cu"
        source.write_text(SOURCE)
        built = Path(tmp) / "hold.so"
        command = [nvcc, "-O2", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-o", str(built), str(source)]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"building the hold kernel failed: {proc.stderr[-2000:]}")
        os.replace(built, target)
    return target


class GpuHold:
    """The loaded hold kernel for one device: ``hold.launch(microseconds)`` enqueues it on the current stream."""

    def __init__(self, library: str | os.PathLike[str], device: Any) -> None:
        import torch

        self._torch = torch
        self._lib = ctypes.CDLL(str(library))
        self._lib.cudagym_hold.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_int]
        self._lib.cudagym_hold.restype = ctypes.c_int
        props = torch.cuda.get_device_properties(device)
        per_sm = int(props.max_threads_per_multi_processor)
        # whole blocks of at most 1,024 threads that fill an SM's thread slots exactly (2,048 on sm_90: 2 x 1,024)
        self.threads = next(t for t in (1024, 768, 512, 384, 256, 128, 64, 32) if per_sm % t == 0)
        self.blocks = int(props.multi_processor_count) * (per_sm // self.threads)
        self.device = device

    def launch(self, microseconds: float) -> None:
        stream = self._torch.cuda.current_stream(self.device).cuda_stream
        code = self._lib.cudagym_hold(stream, int(microseconds * 1000), self.blocks, self.threads)
        if code != 0:
            raise RuntimeError(f"the hold kernel did not launch (cudaError {code})")
