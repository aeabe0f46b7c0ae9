// LayerNorm on the GPU. Main path: one block per row with the row held in registers (float4s): the row is
// read once, mean and centred variance come from two block reductions over registers, then the normalised
// and affine-transformed row is written once. Fallback (long or unaligned rows): passes over global memory.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum; every thread gets the result. `red` holds 32 floats of shared memory.
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

// Rows of d4 float4s, d4 <= THREADS * VEC; thread t owns float4s t, t + THREADS, ...
template <int THREADS, int VEC>
__global__ void __launch_bounds__(THREADS)
    layernorm_reg_kernel(const float4* __restrict__ x, const float4* __restrict__ w, const float4* __restrict__ b,
                         float4* __restrict__ y, int64_t rows, int d4, float eps) {
  __shared__ float red[32];
  const float inv_d = 1.0f / static_cast<float>(4 * d4);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float4* xr = x + row * d4;
    float4* yr = y + row * d4;
    float4 v[VEC];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        v[j] = __ldcs(xr + i);
        s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
      }
    }
    const float mean = block_sum<THREADS>(s, red) * inv_d;
    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        v[j].x -= mean;
        v[j].y -= mean;
        v[j].z -= mean;
        v[j].w -= mean;
        q += (v[j].x * v[j].x + v[j].y * v[j].y) + (v[j].z * v[j].z + v[j].w * v[j].w);
      }
    }
    const float rstd = rsqrtf(block_sum<THREADS>(q, red) * inv_d + eps);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        const float4 g = __ldg(w + i), h = __ldg(b + i);
        __stcs(yr + i, make_float4(fmaf(v[j].x * rstd, g.x, h.x), fmaf(v[j].y * rstd, g.y, h.y),
                                   fmaf(v[j].z * rstd, g.z, h.z), fmaf(v[j].w * rstd, g.w, h.w)));
      }
    }
  }
}

// Any row length and alignment: sum pass, centred sum-of-squares pass, write pass.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    layernorm_generic_kernel(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
                             float* __restrict__ y, int64_t rows, int64_t d, float eps) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * d;
    float* yr = y + row * d;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) s += xr[i];
    const float mean = block_sum<THREADS>(s, red) / static_cast<float>(d);
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += THREADS) {
      const float c = xr[i] - mean;
      q += c * c;
    }
    const float rstd = rsqrtf(block_sum<THREADS>(q, red) / static_cast<float>(d) + eps);
    for (int64_t i = threadIdx.x; i < d; i += THREADS) yr[i] = fmaf((xr[i] - mean) * rstd, w[i], b[i]);
  }
}

template <int THREADS>
void launch_reg(const float* x, const float* w, const float* b, float* y, int64_t rows, int d4, float eps,
                unsigned grid, cudaStream_t stream) {
  layernorm_reg_kernel<THREADS, 4>
      <<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(w),
                                     reinterpret_cast<const float4*>(b), reinterpret_cast<float4*>(y), rows, d4, eps);
}

}  // namespace

// y[r, :] = (x[r, :] - mean) * rsqrt(var + eps) * w + b for `rows` rows of length d (biased variance).
void launch_layernorm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t d, float eps,
                      cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows < 2147483647LL ? rows : 2147483647LL);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                         reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(b);
  if ((addr & 15) == 0 && d % 4 == 0 && d <= 16384) {
    const int d4 = static_cast<int>(d / 4);
    if (d4 <= 128 * 4) {
      launch_reg<128>(x, w, b, y, rows, d4, eps, grid, stream);
    } else if (d4 <= 256 * 4) {
      launch_reg<256>(x, w, b, y, rows, d4, eps, grid, stream);
    } else if (d4 <= 512 * 4) {
      launch_reg<512>(x, w, b, y, rows, d4, eps, grid, stream);
    } else {
      launch_reg<1024>(x, w, b, y, rows, d4, eps, grid, stream);
    }
  } else {
    layernorm_generic_kernel<256><<<grid, 256, 0, stream>>>(x, w, b, y, rows, d, eps);
  }
}
