// Row-wise softmax on the GPU. Main path: one block per row, the whole row held in registers (float4s), so
// the row is read from memory once and written once: block max -> exp and block sum -> scale and store.
// Fallback (row longer than 16384, or not float4-aligned): three passes over global memory.
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

// Rows of d4 float4s, d4 <= THREADS * VEC; thread t owns float4s t, t + THREADS, ...
template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS)
    softmax_reg_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t rows, int d4) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float4* xr = x + row * d4;
    float4* yr = y + row * d4;
    float4 v[VEC];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        v[j] = __ldcs(xr + i);
        m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
      }
    }
    m = block_max<THREADS>(m, red);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        v[j].x = __expf(v[j].x - m);
        v[j].y = __expf(v[j].y - m);
        v[j].z = __expf(v[j].z - m);
        v[j].w = __expf(v[j].w - m);
        s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
      }
    }
    const float inv = 1.0f / block_sum<THREADS>(s, red);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) __stcs(yr + i, make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv));
    }
  }
}

// Any row length and alignment: max pass, sum pass, write pass.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    softmax_generic_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t d) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * d;
    float* yr = y + row * d;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) m = fmaxf(m, xr[i]);
    m = block_max<THREADS>(m, red);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) s += __expf(xr[i] - m);
    const float inv = 1.0f / block_sum<THREADS>(s, red);
    for (int64_t i = threadIdx.x; i < d; i += THREADS) yr[i] = __expf(xr[i] - m) * inv;
  }
}

template <int THREADS>
void launch_reg(const float* x, float* y, int64_t rows, int d4, unsigned grid, cudaStream_t stream) {
  softmax_reg_kernel<THREADS, 4>
      <<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), rows, d4);
}

}  // namespace

// y[r, :] = softmax(x[r, :]) for `rows` rows of length d.
void launch_softmax(const float* x, float* y, int64_t rows, int64_t d, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows < 2147483647LL ? rows : 2147483647LL);
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  if (aligned && d % 4 == 0 && d <= 16384) {
    const int d4 = static_cast<int>(d / 4);
    if (d4 <= 128 * 4) {
      launch_reg<128>(x, y, rows, d4, grid, stream);
    } else if (d4 <= 256 * 4) {
      launch_reg<256>(x, y, rows, d4, grid, stream);
    } else if (d4 <= 512 * 4) {
      launch_reg<512>(x, y, rows, d4, grid, stream);
    } else {
      launch_reg<1024>(x, y, rows, d4, grid, stream);
    }
  } else {
    softmax_generic_kernel<256><<<grid, 256, 0, stream>>>(x, y, rows, d);
  }
}
