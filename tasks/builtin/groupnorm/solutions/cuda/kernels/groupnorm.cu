// GroupNorm on the GPU in two kernels. Statistics: one block per (sample, group) slab, which is contiguous in
// NCHW; a single float4 pass accumulates sums of x - K and (x - K)^2 with K the slab's first element (shifted
// data keeps the one-pass variance accurate), giving mean and rstd. Apply: one block row per (sample, channel)
// plane, float4 streaming, y = x * scale + shift with the per-plane scale/shift folded from the statistics and
// the channel's affine parameters. Memory traffic: two reads of x and one write of y.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;

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

// stats[2 * s] = mean, stats[2 * s + 1] = rstd of slab s (len floats starting at x + s * len).
__global__ void __launch_bounds__(kThreads)
    groupnorm_stats_kernel(const float* __restrict__ x, float* __restrict__ stats, int64_t len, float eps, bool vec4) {
  __shared__ float red[32];
  const float* xs = x + blockIdx.x * len;
  const float k = xs[0];
  float s1 = 0.0f, s2 = 0.0f;
  if (vec4) {
    const float4* x4 = reinterpret_cast<const float4*>(xs);
    for (int64_t i = threadIdx.x; i < len / 4; i += kThreads) {
      const float4 v = __ldg(x4 + i);
      const float a = v.x - k, b = v.y - k, c = v.z - k, d = v.w - k;
      s1 += (a + b) + (c + d);
      s2 += (a * a + b * b) + (c * c + d * d);
    }
  } else {
    for (int64_t i = threadIdx.x; i < len; i += kThreads) {
      const float a = xs[i] - k;
      s1 += a;
      s2 += a * a;
    }
  }
  s1 = block_sum(s1, red);
  s2 = block_sum(s2, red);
  if (threadIdx.x == 0) {
    const float inv_n = 1.0f / static_cast<float>(len);
    const float m1 = s1 * inv_n;
    const float var = fmaxf(s2 * inv_n - m1 * m1, 0.0f);
    stats[2 * blockIdx.x] = k + m1;
    stats[2 * blockIdx.x + 1] = rsqrtf(var + eps);
  }
}

// Plane p = n * C + c of hw floats: y = x * scale + shift. blockIdx.x = plane, blockIdx.y strides the plane.
__global__ void __launch_bounds__(kThreads)
    groupnorm_apply_kernel(const float* __restrict__ x, const float* __restrict__ stats, const float* __restrict__ w,
                           const float* __restrict__ b, float* __restrict__ y, int64_t hw, int channels, int cpg,
                           bool vec4) {
  const int64_t plane = blockIdx.x;
  const int c = static_cast<int>(plane % channels);
  const int64_t slab = (plane / channels) * (channels / cpg) + c / cpg;
  const float scale = stats[2 * slab + 1] * w[c];
  const float shift = b[c] - stats[2 * slab] * scale;
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

// GroupNorm of x (n, channels, hw) with `groups` groups; stats is scratch of 2 * n * groups floats.
void launch_groupnorm(const float* x, const float* w, const float* b, float* y, float* stats, int64_t n, int channels,
                      int64_t hw, int groups, float eps, cudaStream_t stream) {
  const int cpg = channels / groups;
  const int64_t len = static_cast<int64_t>(cpg) * hw;
  const bool vec4 = hw % 4 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  groupnorm_stats_kernel<<<static_cast<unsigned>(n * groups), kThreads, 0, stream>>>(x, stats, len, eps, vec4);
  const int64_t per_plane = (vec4 ? hw / 4 : hw);
  int64_t bx = (per_plane + kThreads * 4 - 1) / (kThreads * 4);  // ~4 items per thread
  if (bx < 1) bx = 1;
  if (bx > 65535) bx = 65535;
  const dim3 grid(static_cast<unsigned>(n * channels), static_cast<unsigned>(bx));
  groupnorm_apply_kernel<<<grid, kThreads, 0, stream>>>(x, stats, w, b, y, hw, channels, cpg, vec4);
}
