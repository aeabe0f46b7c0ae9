// Row argmax on the GPU: one warp per row; each lane scans its strided float4s keeping (value, index) with
// torch's rules (NaN is the maximum, ties go to the lowest index), then a warp-shuffle argmax reduction.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;

// true when (v, i) should replace the current best (bv, bi).
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
  const bool vn = v != v, bn = bv != bv;
  if (vn || bn) return vn && (!bn || i < bi);
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_argmax(float& bv, int64_t& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t i = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
}

// Rows of d4 float4s; lanes stride the row 32 float4s apart (coalesced), so each lane sees increasing indices.
__global__ void __launch_bounds__(kThreads)
    argmax_vec4_kernel(const float4* __restrict__ x, int64_t* __restrict__ y, int64_t rows, int64_t d4) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float4* xr = x + row * d4;
  float bv = -INFINITY;
  int64_t bi = INT64_MAX;
  for (int64_t i = lane; i < d4; i += 32) {
    const float4 v = __ldcs(xr + i);
    if (better(v.x, 4 * i, bv, bi)) {
      bv = v.x;
      bi = 4 * i;
    }
    if (better(v.y, 4 * i + 1, bv, bi)) {
      bv = v.y;
      bi = 4 * i + 1;
    }
    if (better(v.z, 4 * i + 2, bv, bi)) {
      bv = v.z;
      bi = 4 * i + 2;
    }
    if (better(v.w, 4 * i + 3, bv, bi)) {
      bv = v.w;
      bi = 4 * i + 3;
    }
  }
  warp_argmax(bv, bi);
  if (lane == 0) y[row] = bi == INT64_MAX ? 0 : bi;  // a row of only -inf gives index 0 like torch
}

// Any row length / alignment.
__global__ void __launch_bounds__(kThreads)
    argmax_scalar_kernel(const float* __restrict__ x, int64_t* __restrict__ y, int64_t rows, int64_t d) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float* xr = x + row * d;
  float bv = -INFINITY;
  int64_t bi = INT64_MAX;
  for (int64_t i = lane; i < d; i += 32) {
    if (better(xr[i], i, bv, bi)) {
      bv = xr[i];
      bi = i;
    }
  }
  warp_argmax(bv, bi);
  if (lane == 0) y[row] = bi == INT64_MAX ? 0 : bi;
}

}  // namespace

// y[r] = argmax(x[r, 0:d]) for `rows` rows.
void launch_argmax_last_dim(const float* x, int64_t* y, int64_t rows, int64_t d, cudaStream_t stream) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (d % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    argmax_vec4_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x), y,
                                                                               rows, d / 4);
  } else {
    argmax_scalar_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, rows, d);
  }
}
