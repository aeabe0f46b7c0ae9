// Row-wise log-sum-exp on the GPU: block max and block sum of exp over a register-resident row; one read.
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
    logsumexp_reg_kernel(const float4* __restrict__ x, float* __restrict__ y, int64_t rows, int d4) {
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
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        m = fmaxf(m, hmax(v[j]));
      }
    }
    m = block_max<THREADS>(m, red);
    const float mc = isinf(m) ? 0.0f : m;  // all -inf row -> -inf, +inf -> +inf, like torch.logsumexp
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        s += (__expf(v[j].x - mc) + __expf(v[j].y - mc)) + (__expf(v[j].z - mc) + __expf(v[j].w - mc));
      }
    }
    s = block_sum<THREADS>(s, red);
    if (threadIdx.x == 0) y[row] = mc + __logf(s);
  }
}

// Fallback for any row length and alignment: passes over global memory, one block per row.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    logsumexp_generic_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t d) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * d;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) m = fmaxf(m, xr[i]);
    m = block_max<THREADS>(m, red);
    const float mc = isinf(m) ? 0.0f : m;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) s += __expf(xr[i] - mc);
    s = block_sum<THREADS>(s, red);
    if (threadIdx.x == 0) y[row] = mc + __logf(s);
  }
}

template <int THREADS>
void launch_reg(const float* x, float* y, int64_t rows, int d4, unsigned grid, cudaStream_t stream) {
  logsumexp_reg_kernel<THREADS, 4><<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), y, rows, d4);
}

}  // namespace

// y[r] = logsumexp(x[r, :]) for `rows` rows of length d.
void launch_logsumexp(const float* x, float* y, int64_t rows, int64_t d, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows < 2147483647LL ? rows : 2147483647LL);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(x);
  if ((addr & 15) == 0 && d % 4 == 0 && d >= 4 && d <= 16384) {
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
    logsumexp_generic_kernel<256><<<grid, 256, 0, stream>>>(x, y, rows, d);
  }
}
