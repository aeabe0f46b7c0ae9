// Batch normalisation with batch statistics on the GPU in two kernels. Statistics: a (channel, split) grid where
// each block sums x - K and (x - K)^2 over a subset of the samples' (H*W) planes of its channel (K = the
// channel's first element; shifted sums keep the one-pass variance accurate) and writes one partial pair.
// Apply: one block row per (sample, channel) plane; each block folds the channel's partials into mean and
// rstd, then streams y = x * scale + shift with float4s. Memory traffic: two reads of x, one write of y.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kSplit = 32;  // partial sums per channel

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum of kThreads threads; the result is valid in every thread.
__device__ __forceinline__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = warp_sum(lane < kThreads / 32 ? red[lane] : 0.0f);
  __syncthreads();
  return v;
}

// part[(c * kSplit + s) * 2 + {0, 1}] = sums of (x - K) and (x - K)^2 over planes n = s, s + kSplit, ... of channel c.
__global__ void __launch_bounds__(kThreads) bn_partial_kernel(const float* __restrict__ x, float* __restrict__ part,
                                                              int64_t n, int channels, int64_t hw, bool vec4) {
  __shared__ float red[32];
  const int c = blockIdx.x, s = blockIdx.y;
  const float k = x[static_cast<int64_t>(c) * hw];
  float s1 = 0.0f, s2 = 0.0f;
  for (int64_t i = s; i < n; i += kSplit) {
    const float* xp = x + (i * channels + c) * hw;
    if (vec4) {
      const float4* x4 = reinterpret_cast<const float4*>(xp);
      for (int64_t j = threadIdx.x; j < hw / 4; j += kThreads) {
        const float4 v = __ldg(x4 + j);
        const float a = v.x - k, b = v.y - k, cc = v.z - k, d = v.w - k;
        s1 += (a + b) + (cc + d);
        s2 += (a * a + b * b) + (cc * cc + d * d);
      }
    } else {
      for (int64_t j = threadIdx.x; j < hw; j += kThreads) {
        const float a = xp[j] - k;
        s1 += a;
        s2 += a * a;
      }
    }
  }
  s1 = block_sum(s1, red);
  s2 = block_sum(s2, red);
  if (threadIdx.x == 0) {
    part[(c * kSplit + s) * 2] = s1;
    part[(c * kSplit + s) * 2 + 1] = s2;
  }
}

// Plane p = n * C + c: y = x * scale + shift with scale/shift from channel c's partial sums.
__global__ void __launch_bounds__(kThreads)
    bn_apply_kernel(const float* __restrict__ x, const float* __restrict__ part, const float* __restrict__ w,
                    const float* __restrict__ b, float* __restrict__ y, int64_t n, int channels, int64_t hw, float eps,
                    bool vec4) {
  __shared__ float coef[2];
  const int64_t plane = blockIdx.x;
  const int c = static_cast<int>(plane % channels);
  if (threadIdx.x < 32) {
    float s1 = 0.0f, s2 = 0.0f;
    for (int s = threadIdx.x; s < kSplit; s += 32) {
      s1 += part[(c * kSplit + s) * 2];
      s2 += part[(c * kSplit + s) * 2 + 1];
    }
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
    if (threadIdx.x == 0) {
      const float inv_cnt = 1.0f / static_cast<float>(n * hw);
      const float m1 = s1 * inv_cnt;
      const float var = fmaxf(s2 * inv_cnt - m1 * m1, 0.0f);
      const float scale = w[c] * rsqrtf(var + eps);
      coef[0] = scale;
      coef[1] = b[c] - (x[static_cast<int64_t>(c) * hw] + m1) * scale;
    }
  }
  __syncthreads();
  const float scale = coef[0], shift = coef[1];
  const float* xp = x + plane * hw;
  float* yp = y + plane * hw;
  const int64_t stride = static_cast<int64_t>(gridDim.y) * kThreads;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(xp);
    float4* y4 = reinterpret_cast<float4*>(yp);
    for (int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x; i < hw / 4; i += stride) {
      const float4 v = __ldcs(x4 + i);
      __stcs(y4 + i, make_float4(fmaf(v.x, scale, shift), fmaf(v.y, scale, shift), fmaf(v.z, scale, shift),
                                 fmaf(v.w, scale, shift)));
    }
  } else {
    for (int64_t i = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x; i < hw; i += stride) {
      yp[i] = fmaf(xp[i], scale, shift);
    }
  }
}

}  // namespace

// Batch norm of x (n, channels, hw) with batch statistics; part is scratch of 2 * channels * 32 floats.
void launch_batchnorm_train(const float* x, const float* w, const float* b, float* y, float* part, int64_t n,
                            int channels, int64_t hw, float eps, cudaStream_t stream) {
  const bool vec4 = hw % 4 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  bn_partial_kernel<<<dim3(channels, kSplit), kThreads, 0, stream>>>(x, part, n, channels, hw, vec4);
  const int64_t per_plane = vec4 ? hw / 4 : hw;
  int64_t bx = (per_plane + kThreads * 4 - 1) / (kThreads * 4);
  if (bx < 1) bx = 1;
  if (bx > 65535) bx = 65535;
  const dim3 grid(static_cast<unsigned>(n * channels), static_cast<unsigned>(bx));
  bn_apply_kernel<<<grid, kThreads, 0, stream>>>(x, part, w, b, y, n, channels, hw, eps, vec4);
}
