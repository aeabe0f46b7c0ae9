// clamp(gelu_tanh(x * w + b), max=hi) on the GPU in one streaming pass (eager runs four kernels). Each block handles
// kRows rows; a thread loads its float4 of w and b once and applies them to kRows rows, all loads issued first.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kRows = 4;

// tanh via the SFU instruction (sm_75+), max relative error ~2^-11, far inside the 1e-2 tolerance.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float f(float x, float w, float b, float hi) {
  const float v = fmaf(x, w, b);
  const float u = 0.7978845608028654f * fmaf(0.044715f * v, v * v, v);
  return fminf(0.5f * v * (1.0f + tanh_approx(u)), hi);
}

__global__ void __launch_bounds__(kThreads)
    affine_gelu_clamp_vec4_kernel(const float4* __restrict__ x, const float4* __restrict__ w,
                                  const float4* __restrict__ b, float4* __restrict__ y, int64_t rows, int d4,
                                  float hi) {
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  for (int c = threadIdx.x; c < d4; c += kThreads) {
    const float4 s = __ldg(w + c), t = __ldg(b + c);
    float4 v[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r < rows) v[r] = __ldcs(x + (row0 + r) * d4 + c);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r < rows) {
        __stcs(y + (row0 + r) * d4 + c, make_float4(f(v[r].x, s.x, t.x, hi), f(v[r].y, s.y, t.y, hi),
                                                    f(v[r].z, s.z, t.z, hi), f(v[r].w, s.w, t.w, hi)));
      }
    }
  }
}

// Any shape / alignment: flat grid-stride loop, column = i % d.
__global__ void affine_gelu_clamp_scalar_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                const float* __restrict__ b, float* __restrict__ y, int64_t n,
                                                int64_t d, float hi) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t c = i % d;
    y[i] = f(x[i], w[c], b[c], hi);
  }
}

}  // namespace

// y[r, c] = min(gelu_tanh(x[r, c] * w[c] + b[c]), hi) for x of shape (rows, d).
void launch_affine_gelu_clamp(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t d,
                              float hi, cudaStream_t stream) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
                         reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(y);
  if ((addr & 15) == 0 && d % 4 == 0 && d / 4 <= 2147483647LL) {
    const int64_t blocks = (rows + kRows - 1) / kRows;
    affine_gelu_clamp_vec4_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(w), reinterpret_cast<const float4*>(b),
        reinterpret_cast<float4*>(y), rows, static_cast<int>(d / 4), hi);
  } else {
    const int64_t n = rows * d;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 65535) blocks = 65535;
    affine_gelu_clamp_scalar_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, w, b, y, n, d, hi);
  }
}
