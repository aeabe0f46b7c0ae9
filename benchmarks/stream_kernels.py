"""How fast and how steady one streaming pass runs, written several ways, in several fresh processes.

    python benchmarks/stream_kernels.py --processes 5

The elementwise reference solutions (ReLU, GELU, ...) are one read and one write of every element. Five
``profile`` calls on them gave speedups 3-5% apart on the H200 while eager PyTorch, timed the same way in fresh
processes, stayed within 1.5% (docs/benchmarks.md). This benchmark asks whether the way the kernel is written
decides that: it builds a few ReLU kernels into one shared library with nvcc (no torch headers, so the build
takes a second), then each of ``--processes`` fresh processes allocates its own buffers and times every variant
and eager PyTorch with ``cudagym.harness.timing`` (the method ``profile`` uses). The table gives, per variant,
each process's median, the spread across processes ((max - min) / min) and the bandwidth of the median.

Variants (all 16-byte vector accesses, 256 threads a block):

- ``cs_unroll4``: the reference solutions' kernel: four float4 per thread, streaming cache hints on loads and
  stores (``__ldcs``/``__stcs``), one block per 1,024 float4.
- ``plain_unroll4``: the same without cache hints.
- ``plain_unroll1``: one float4 per thread, no hints (the shape of PyTorch's vectorised elementwise kernel).
- ``cs_load_plain_store``: streaming loads, plain stores.
- ``grid_stride``: a fixed grid of eight blocks per SM, each thread striding over the tensor, no hints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

VARIANTS = ("cs_unroll4", "plain_unroll4", "plain_unroll1", "cs_load_plain_store", "grid_stride")

SOURCE = r"""
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float4 relu4(float4 a) {
  a.x = fmaxf(a.x, 0.f); a.y = fmaxf(a.y, 0.f); a.z = fmaxf(a.z, 0.f); a.w = fmaxf(a.w, 0.f);
  return a;
}

template <int kUnroll, bool kCsLoad, bool kCsStore>
__global__ void __launch_bounds__(256) unrolled(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * (256 * kUnroll) + threadIdx.x;
  float4 v[kUnroll];
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t i = base + k * 256;
    if (i < n4) v[k] = kCsLoad ? __ldcs(x + i) : x[i];
  }
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t i = base + k * 256;
    if (i < n4) {
      if (kCsStore) __stcs(y + i, relu4(v[k])); else y[i] = relu4(v[k]);
    }
  }
}

__global__ void __launch_bounds__(256) grid_stride(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * 256;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; i < n4; i += stride) y[i] = relu4(x[i]);
}

template <int kUnroll, bool kCsLoad, bool kCsStore>
static void launch(const void* x, void* y, int64_t n, void* stream) {
  const int64_t n4 = n / 4;
  const int64_t blocks = (n4 + 256 * kUnroll - 1) / (256 * kUnroll);
  unrolled<kUnroll, kCsLoad, kCsStore><<<static_cast<unsigned>(blocks), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const float4*>(x), static_cast<float4*>(y), n4);
}

extern "C" {
void cs_unroll4(const void* x, void* y, int64_t n, void* s) { launch<4, true, true>(x, y, n, s); }
void plain_unroll4(const void* x, void* y, int64_t n, void* s) { launch<4, false, false>(x, y, n, s); }
void plain_unroll1(const void* x, void* y, int64_t n, void* s) { launch<1, false, false>(x, y, n, s); }
void cs_load_plain_store(const void* x, void* y, int64_t n, void* s) { launch<4, true, false>(x, y, n, s); }
void grid_stride_launch(const void* x, void* y, int64_t n, void* s) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  grid_stride<<<sms * 8, 256, 0, static_cast<cudaStream_t>(s)>>>(static_cast<const float4*>(x),
                                                                 static_cast<float4*>(y), n / 4);
}
}
"""

CHILD = r"""
import ctypes, json, sys
import torch
from cudagym.harness.timing import TimingConfig, time_callable

lib = ctypes.CDLL(sys.argv[1])
numel = int(sys.argv[2])
x = torch.randn(numel, device="cuda")
y = torch.empty_like(x)
result = {}
for name in json.loads(sys.argv[3]):
    fn = getattr(lib, "grid_stride_launch" if name == "grid_stride" else name)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    def call(fn=fn):
        fn(x.data_ptr(), y.data_ptr(), numel, torch.cuda.current_stream().cuda_stream)
    call()
    torch.cuda.synchronize()
    assert torch.equal(y, torch.clamp_min(x, 0.0)), name
    result[name] = time_callable(call, "cuda", TimingConfig()).median_ms
result["eager"] = time_callable(lambda: torch.clamp_min(x, 0.0, out=y), "cuda", TimingConfig()).median_ms
print(json.dumps(result))
"""


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / min(values) if values else 0.0


def build(folder: Path, arch: str) -> Path:
    source, library = folder / "stream_kernels.cu", folder / "stream_kernels.so"
    source.write_text(SOURCE)
    command = ["nvcc", "-O3", f"-arch={arch}", "-shared", "-Xcompiler", "-fPIC", "-o", str(library), str(source)]
    subprocess.run(command, check=True)
    return library


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--numel", type=int, default=536870912, help="floats (default: builtin/relu's GPU size)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="cudagym-stream-") as tmp:
        library = build(Path(tmp), args.arch)
        for _ in range(args.processes):
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(library), str(args.numel), json.dumps(variants)],
                capture_output=True,
                text=True,
                timeout=args.timeout,
                env=os.environ.copy(),
            )
            if proc.returncode != 0:
                sys.exit(f"a process failed: {proc.stderr[-2000:]}")
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    moved = 2 * 4 * args.numel
    print(f"\nReLU of {args.numel} floats, {args.processes} fresh processes, median ms per process\n")
    print("| kernel | per-process medians ms | across processes | TB/s (median) |")
    print("|---|---|---|---|")
    for name in [*variants, "eager"]:
        times = [run[name] for run in runs]
        cells = ", ".join(f"{t:.4g}" for t in times)
        tbps = moved / (statistics.median(times) * 1e-3) / 1e12
        print(f"| {name} | {cells} | {spread(times):.2%} | {tbps:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"numel": args.numel, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
