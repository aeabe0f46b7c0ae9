// Row means on the CPU: rows split across OpenMP threads, each reduced with a vectorised SIMD sum.
#include <bit>
#include <cmath>
#include <cstdint>

// y[r] = sum(x[r, 0:d]) / d.
void mean_last_dim_kernel(const float* __restrict x, float* __restrict y, int64_t rows, int64_t d) {
  const float inv = 1.0f / static_cast<float>(d);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * d;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d; ++i) s += row[i];
    y[r] = s * inv;
  }
}
