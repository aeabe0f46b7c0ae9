// relu((x - mean) / (std + eps)) per row on the GPU (unbiased std). Main path: one block per row with the row
// held in registers (float4s): one read, two block reductions (mean, centred sum of squares), one write.
// Fallback (long or unaligned rows): passes over global memory.
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
    standardize_relu_reg_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t rows, int d4, float eps) {
  __shared__ float red[32];
  const float d = static_cast<float>(4 * d4);
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
    const float mean = block_sum<THREADS>(s, red) / d;
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
    const float inv = 1.0f / (sqrtf(block_sum<THREADS>(q, red) / (d - 1.0f)) + eps);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int i = threadIdx.x + j * THREADS;
      if (i < d4) {
        __stcs(yr + i, make_float4(fmaxf(v[j].x * inv, 0.0f), fmaxf(v[j].y * inv, 0.0f), fmaxf(v[j].z * inv, 0.0f),
                                   fmaxf(v[j].w * inv, 0.0f)));
      }
    }
  }
}

// Any row length and alignment: sum pass, centred sum-of-squares pass, write pass.
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
    standardize_relu_generic_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t d,
                                    float eps) {
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
    // d == 1 gives 0/0 = NaN, like torch.std
    const float inv = 1.0f / (sqrtf(block_sum<THREADS>(q, red) / static_cast<float>(d - 1)) + eps);
    for (int64_t i = threadIdx.x; i < d; i += THREADS) yr[i] = fmaxf((xr[i] - mean) * inv, 0.0f);
  }
}

template <int THREADS>
void launch_reg(const float* x, float* y, int64_t rows, int d4, float eps, unsigned grid, cudaStream_t stream) {
  standardize_relu_reg_kernel<THREADS, 4>
      <<<grid, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), rows, d4, eps);
}

}  // namespace

// y[r, :] = relu((x[r, :] - mean) / (std + eps)) for `rows` rows of length d.
void launch_row_standardize_relu(const float* x, float* y, int64_t rows, int64_t d, float eps, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows < 2147483647LL ? rows : 2147483647LL);
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  if (aligned && d % 4 == 0 && d >= 4 && d <= 16384) {
    const int d4 = static_cast<int>(d / 4);
    if (d4 <= 128 * 4) {
      launch_reg<128>(x, y, rows, d4, eps, grid, stream);
    } else if (d4 <= 256 * 4) {
      launch_reg<256>(x, y, rows, d4, eps, grid, stream);
    } else if (d4 <= 512 * 4) {
      launch_reg<512>(x, y, rows, d4, eps, grid, stream);
    } else {
      launch_reg<1024>(x, y, rows, d4, eps, grid, stream);
    }
  } else {
    standardize_relu_generic_kernel<256><<<grid, 256, 0, stream>>>(x, y, rows, d, eps);
  }
}
