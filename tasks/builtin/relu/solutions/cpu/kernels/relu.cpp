// ReLU on the CPU: one OpenMP-parallel, auto-vectorised pass over the flat tensor.
#include <cstdint>

// y[i] = max(x[i], 0) for i in [0, n); threads take contiguous static chunks.
void relu_kernel(const float* __restrict x, float* __restrict y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}
