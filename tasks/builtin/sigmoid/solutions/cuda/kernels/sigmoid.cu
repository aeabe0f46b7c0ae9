// Sigmoid on the GPU: one streaming pass
// float4 loads/stores with streaming cache hints, 4 independent 16-byte loads in flight per thread;
// a scalar kernel finishes the tail (or everything when a pointer is not 16-byte aligned).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // float4s per thread

// 1 / (1 + exp(-v))
__device__ __forceinline__ float op(float v) { return 1.0f / (1.0f + __expf(-v)); }

__global__ void __launch_bounds__(kThreads)
    sigmoid_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
  float4 v[kUnroll];
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t i = base + k * kThreads;
    if (i < n4) v[k] = __ldcs(x + i);
  }
#pragma unroll
  for (int k = 0; k < kUnroll; ++k) {
    const int64_t i = base + k * kThreads;
    if (i < n4) {
      float4 a = v[k];
      a.x = op(a.x);
      a.y = op(a.y);
      a.z = op(a.z);
      a.w = op(a.w);
      __stcs(y + i, a);
    }
  }
}

__global__ void sigmoid_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = start + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = op(x[i]);
}

}  // namespace

// y = op(x) for n floats on `stream`.
void launch_sigmoid(const float* x, float* y, int64_t n, cudaStream_t stream) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  const int64_t n4 = aligned ? n / 4 : 0;
  if (n4 > 0) {
    const int64_t blocks = (n4 + kThreads * kUnroll - 1) / (kThreads * kUnroll);
    sigmoid_vec4_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                                                reinterpret_cast<float4*>(y), n4);
  }
  const int64_t done = n4 * 4;
  if (done < n) {
    int64_t blocks = (n - done + kThreads - 1) / kThreads;
    if (blocks > 65535) blocks = 65535;
    sigmoid_scalar_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, done, n);
  }
}
