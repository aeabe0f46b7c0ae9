// Row means on the GPU: one warp per row, float4 streaming loads with four loads in flight per lane,
// then a warp-shuffle reduction. A scalar variant handles rows that are not float4-aligned.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float hsum(float4 a) { return (a.x + a.y) + (a.z + a.w); }

// y[row] = mean(x[row, :]) with rows of d4 float4s; lanes stride the row 32 float4s apart (coalesced).
__global__ void __launch_bounds__(kThreads)
    mean_rows_vec4_kernel(const float4* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t d4, float inv_d) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float4* xr = x + row * d4;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t i = lane;
  for (; i + 96 < d4; i += 128) {
    const float4 a = __ldcs(xr + i);
    const float4 b = __ldcs(xr + i + 32);
    const float4 c = __ldcs(xr + i + 64);
    const float4 e = __ldcs(xr + i + 96);
    s0 += hsum(a);
    s1 += hsum(b);
    s2 += hsum(c);
    s3 += hsum(e);
  }
  for (; i < d4; i += 32) s0 += hsum(__ldcs(xr + i));
  const float s = warp_sum((s0 + s1) + (s2 + s3));
  if (lane == 0) y[row] = s * inv_d;
}

// Same reduction for any row length / alignment, one float at a time.
__global__ void __launch_bounds__(kThreads)
    mean_rows_scalar_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t d, float inv_d) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (row >= rows) return;
  const float* xr = x + row * d;
  float s0 = 0.0f, s1 = 0.0f;
  int64_t i = lane;
  for (; i + 32 < d; i += 64) {
    s0 += xr[i];
    s1 += xr[i + 32];
  }
  if (i < d) s0 += xr[i];
  const float s = warp_sum(s0 + s1);
  if (lane == 0) y[row] = s * inv_d;
}

}  // namespace

// y[r] = mean(x[r, 0:d]) for `rows` rows.
void launch_mean_last_dim(const float* x, float* y, int64_t rows, int64_t d, cudaStream_t stream) {
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (d % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    mean_rows_vec4_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), y, rows, d / 4, 1.0f / static_cast<float>(d));
  } else {
    mean_rows_scalar_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, y, rows, d,
                                                                                    1.0f / static_cast<float>(d));
  }
}
