// Max over the middle dimension of (B, M, N) on the GPU. A block covers 32 float4 columns of one batch with
// 8 warps splitting the M rows (coalesced 512-byte row segments, 4 loads in flight per thread); the 8 partial
// maxima are combined through shared memory. NaN propagates like torch.max.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kCols = 32;  // float4 columns per block (threadIdx.x)
constexpr int kSplit = 8;  // row groups per block (threadIdx.y)

__device__ __forceinline__ float nanmax(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ float4 nanmax4(float4 a, float4 b) {
  return make_float4(nanmax(a.x, b.x), nanmax(a.y, b.y), nanmax(a.z, b.z), nanmax(a.w, b.w));
}

__global__ void __launch_bounds__(kCols* kSplit)
    max_dim1_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y, int m, int n4) {
  __shared__ float4 part[kSplit][kCols];
  const int c = blockIdx.x * kCols + threadIdx.x;
  const int64_t b = blockIdx.y;
  float4 acc = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
  if (c < n4) {
    const float4* xb = x + b * m * n4 + c;
    int r = threadIdx.y;
    for (; r + 3 * kSplit < m; r += 4 * kSplit) {
      const float4 v0 = __ldcs(xb + static_cast<int64_t>(r) * n4);
      const float4 v1 = __ldcs(xb + static_cast<int64_t>(r + kSplit) * n4);
      const float4 v2 = __ldcs(xb + static_cast<int64_t>(r + 2 * kSplit) * n4);
      const float4 v3 = __ldcs(xb + static_cast<int64_t>(r + 3 * kSplit) * n4);
      acc = nanmax4(acc, nanmax4(nanmax4(v0, v1), nanmax4(v2, v3)));
    }
    for (; r < m; r += kSplit) acc = nanmax4(acc, __ldcs(xb + static_cast<int64_t>(r) * n4));
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < n4) {
#pragma unroll
    for (int s = 1; s < kSplit; ++s) acc = nanmax4(acc, part[s][threadIdx.x]);
    y[b * n4 + c] = acc;
  }
}

// Any shape / alignment: one thread per output element.
__global__ void max_dim1_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t bsz, int64_t m,
                                       int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= bsz * n) return;
  const int64_t b = idx / n, c = idx - b * n;
  const float* xb = x + b * m * n + c;
  float acc = -INFINITY;
  for (int64_t r = 0; r < m; ++r) acc = nanmax(acc, xb[r * n]);
  y[idx] = acc;
}

}  // namespace

// y[b, c] = max_r x[b, r, c] for x of shape (bsz, m, n), m > 0.
void launch_max_dim1(const float* x, float* y, int64_t bsz, int64_t m, int64_t n, cudaStream_t stream) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
  if (aligned && n % 4 == 0 && m < (1LL << 31) && n / 4 < (1LL << 31) && bsz < 65536) {
    const int n4 = static_cast<int>(n / 4);
    const dim3 grid((n4 + kCols - 1) / kCols, static_cast<unsigned>(bsz));
    max_dim1_vec4_kernel<<<grid, dim3(kCols, kSplit), 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), static_cast<int>(m), n4);
  } else {
    const int64_t total = bsz * n;
    max_dim1_scalar_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(x, y, bsz, m, n);
  }
}
