// rmsnorm(x) * weight * silu(gate) on the GPU: the x row is held in registers for one block sum of squares; gate is
// streamed in the output pass; one read of each input, one write (eager makes six passes).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions; every thread gets the result. `red` holds 32 floats of shared memory.
template <int THREADS>
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  if constexpr (THREADS > 32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = warp_sum(lane < THREADS / 32 ? red[lane] : 0.0f);
    __syncthreads();
  }
  return v;
}

template <int THREADS>
__device__ __forceinline__ float block_max(float v, float* red) {
  v = warp_max(v);
  if constexpr (THREADS > 32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = warp_max(lane < THREADS / 32 ? red[lane] : -INFINITY);
    __syncthreads();
  }
  return v;
}

__device__ __forceinline__ float hsum(float4 a) { return (a.x + a.y) + (a.z + a.w); }
__device__ __forceinline__ float hmax(float4 a) { return fmaxf(fmaxf(a.x, a.y), fmaxf(a.z, a.w)); }
__device__ __forceinline__ float hsq(float4 a) { return (a.x * a.x + a.y * a.y) + (a.z * a.z + a.w * a.w); }

// silu(t) = t * sigmoid(t); __expf / fast division under --use_fast_math, saturating correctly.
__device__ __forceinline__ float silu(float t) { return t / (1.0f + __expf(-t)); }

// Register path: one block per row of d4 float4s (d4 <= THREADS * VEC); thread t owns float4s t, t + THREADS, ...
// The row is read from memory once and (where it has one) the output row written once.
template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS)
    rmsnorm_swiglu_reg_kernel(const float4* __restrict__ x, const float4* __restrict__ gate,
                              const float4* __restrict__ w, float4* __restrict__ y, int64_t rows, int d4, float eps) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float4 v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        v[j] = __ldcs(x + row * d4 + i);
      }
    }
    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        q += hsq(v[j]);
      }
    }
    const float inv = rsqrtf(block_sum<THREADS>(q, red) / static_cast<float>(4 * d4) + eps);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        const float4 g = __ldg(w + i), t = __ldcs(gate + row * d4 + i);
        __stcs(y + row * d4 + i, make_float4(v[j].x * inv * g.x * silu(t.x), v[j].y * inv * g.y * silu(t.y),
                                             v[j].z * inv * g.z * silu(t.z), v[j].w * inv * g.w * silu(t.w)));
      }
    }
  }
}

// Fallback for any row length and alignment: passes over global memory, one block per row.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    rmsnorm_swiglu_generic_kernel(const float* __restrict__ x, const float* __restrict__ gate,
                                  const float* __restrict__ w, float* __restrict__ y, int64_t rows, int64_t d,
                                  float eps) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * d;
    const float* gr = gate + row * d;
    float* yr = y + row * d;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) q += xr[i] * xr[i];
    const float inv = rsqrtf(block_sum<THREADS>(q, red) / static_cast<float>(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += THREADS) yr[i] = xr[i] * inv * w[i] * silu(gr[i]);
  }
}

template <int THREADS>
void launch_reg(const float* x, const float* gate, const float* w, float* y, int64_t rows, int d4, float eps,
                unsigned grid, cudaStream_t stream) {
  rmsnorm_swiglu_reg_kernel<THREADS, 4>
      <<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(gate),
                                     reinterpret_cast<const float4*>(w), reinterpret_cast<float4*>(y), rows, d4, eps);
}

}  // namespace

// y = x * rsqrt(mean(x^2) + eps) * w * silu(gate), per row.
void launch_rmsnorm_swiglu(const float* x, const float* gate, const float* w, float* y, int64_t rows, int64_t d,
                           float eps, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows < 2147483647LL ? rows : 2147483647LL);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(gate) |
                         reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y);
  if ((addr & 15) == 0 && d % 4 == 0 && d >= 4 && d <= 16384) {
    const int d4 = static_cast<int>(d / 4);
    if (d4 <= 128 * 4) {
      launch_reg<128>(x, gate, w, y, rows, d4, eps, grid, stream);
    } else if (d4 <= 256 * 4) {
      launch_reg<256>(x, gate, w, y, rows, d4, eps, grid, stream);
    } else if (d4 <= 512 * 4) {
      launch_reg<512>(x, gate, w, y, rows, d4, eps, grid, stream);
    } else {
      launch_reg<1024>(x, gate, w, y, rows, d4, eps, grid, stream);
    }
  } else {
    rmsnorm_swiglu_generic_kernel<256><<<grid, 256, 0, stream>>>(x, gate, w, y, rows, d, eps);
  }
}
