// softmax(x * scale + bias) per row on the GPU: the logits are formed in registers as the row is read, then block max,
// exp and block sum, scale and write; one read, one write (eager makes three kernels and two temporaries).
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

// Register path: one block per row of d4 float4s (d4 <= THREADS * VEC); thread t owns float4s t, t + THREADS, ...
// The row is read from memory once and (where it has one) the output row written once.
template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS)
    softmax_scale_bias_reg_kernel(const float4* __restrict__ x, const float4* __restrict__ bias, float4* __restrict__ y,
                                  int64_t rows, int d4, float scale) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    float4 v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        v[j] = __ldcs(x + row * d4 + i);
        const float4 b = __ldg(bias + i);
        v[j] = make_float4(fmaf(v[j].x, scale, b.x), fmaf(v[j].y, scale, b.y), fmaf(v[j].z, scale, b.z),
                           fmaf(v[j].w, scale, b.w));
      }
    }
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        m = fmaxf(m, hmax(v[j]));
      }
    }
    m = block_max<THREADS>(m, red);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        v[j] = make_float4(__expf(v[j].x - m), __expf(v[j].y - m), __expf(v[j].z - m), __expf(v[j].w - m));
        s += hsum(v[j]);
      }
    }
    const float inv = 1.0f / block_sum<THREADS>(s, red);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        __stcs(y + row * d4 + i, make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv));
      }
    }
  }
}

// Fallback for any row length and alignment: passes over global memory, one block per row.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    softmax_scale_bias_generic_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                      float* __restrict__ y, int64_t rows, int64_t d, float scale) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * d;
    float* yr = y + row * d;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) m = fmaxf(m, fmaf(xr[i], scale, bias[i]));
    m = block_max<THREADS>(m, red);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) s += __expf(fmaf(xr[i], scale, bias[i]) - m);
    const float inv = 1.0f / block_sum<THREADS>(s, red);
    for (int64_t i = threadIdx.x; i < d; i += THREADS) yr[i] = __expf(fmaf(xr[i], scale, bias[i]) - m) * inv;
  }
}

template <int THREADS>
void launch_reg(const float* x, const float* bias, float* y, int64_t rows, int d4, float scale, unsigned grid,
                cudaStream_t stream) {
  softmax_scale_bias_reg_kernel<THREADS, 4>
      <<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(bias),
                                     reinterpret_cast<float4*>(y), rows, d4, scale);
}

}  // namespace

// y[r, :] = softmax(x[r, :] * scale + bias).
void launch_softmax_scale_bias(const float* x, const float* bias, float* y, int64_t rows, int64_t d, float scale,
                               cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows < 2147483647LL ? rows : 2147483647LL);
  const uintptr_t addr =
      reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(bias) | reinterpret_cast<uintptr_t>(y);
  if ((addr & 15) == 0 && d % 4 == 0 && d >= 4 && d <= 16384) {
    const int d4 = static_cast<int>(d / 4);
    if (d4 <= 128 * 4) {
      launch_reg<128>(x, bias, y, rows, d4, scale, grid, stream);
    } else if (d4 <= 256 * 4) {
      launch_reg<256>(x, bias, y, rows, d4, scale, grid, stream);
    } else if (d4 <= 512 * 4) {
      launch_reg<512>(x, bias, y, rows, d4, scale, grid, stream);
    } else {
      launch_reg<1024>(x, bias, y, rows, d4, scale, grid, stream);
    }
  } else {
    softmax_scale_bias_generic_kernel<256><<<grid, 256, 0, stream>>>(x, bias, y, rows, d, scale);
  }
}
