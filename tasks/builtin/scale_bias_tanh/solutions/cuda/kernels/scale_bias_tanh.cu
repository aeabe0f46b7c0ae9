// tanh(x * scale + bias) on the GPU in one streaming pass (eager PyTorch runs three kernels). Each block
// handles kRows rows; a thread loads its float4 of scale/bias once and applies it to kRows rows, with the
// kRows input loads issued before any math. tanh comes from the hardware tanh.approx instruction.
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

__device__ __forceinline__ float4 apply(float4 v, float4 s, float4 b) {
  return make_float4(tanh_approx(fmaf(v.x, s.x, b.x)), tanh_approx(fmaf(v.y, s.y, b.y)),
                     tanh_approx(fmaf(v.z, s.z, b.z)), tanh_approx(fmaf(v.w, s.w, b.w)));
}

// x, y: (rows, d4) float4s; scale, bias: d4 float4s.
__global__ void __launch_bounds__(kThreads)
    scale_bias_tanh_vec4_kernel(const float4* __restrict__ x, const float4* __restrict__ scale,
                                const float4* __restrict__ bias, float4* __restrict__ y, int64_t rows, int d4) {
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  for (int c = threadIdx.x; c < d4; c += kThreads) {
    const float4 s = __ldg(scale + c), b = __ldg(bias + c);
    float4 v[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r < rows) v[r] = __ldcs(x + (row0 + r) * d4 + c);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row0 + r < rows) __stcs(y + (row0 + r) * d4 + c, apply(v[r], s, b));
    }
  }
}

// Any shape / alignment: flat grid-stride loop, column = i % d.
__global__ void scale_bias_tanh_scalar_kernel(const float* __restrict__ x, const float* __restrict__ scale,
                                              const float* __restrict__ bias, float* __restrict__ y, int64_t n,
                                              int64_t d) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t c = i % d;
    y[i] = tanh_approx(fmaf(x[i], scale[c], bias[c]));
  }
}

}  // namespace

// y[r, c] = tanh(x[r, c] * scale[c] + bias[c]) for x of shape (rows, d).
void launch_scale_bias_tanh(const float* x, const float* scale, const float* bias, float* y, int64_t rows, int64_t d,
                            cudaStream_t stream) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(scale) |
                         reinterpret_cast<uintptr_t>(bias) | reinterpret_cast<uintptr_t>(y);
  if ((addr & 15) == 0 && d % 4 == 0 && d / 4 <= 2147483647LL) {
    const int64_t blocks = (rows + kRows - 1) / kRows;
    scale_bias_tanh_vec4_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(scale),
        reinterpret_cast<const float4*>(bias), reinterpret_cast<float4*>(y), rows, static_cast<int>(d / 4));
  } else {
    const int64_t n = rows * d;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 65535) blocks = 65535;
    scale_bias_tanh_scalar_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, scale, bias, y, n, d);
  }
}
