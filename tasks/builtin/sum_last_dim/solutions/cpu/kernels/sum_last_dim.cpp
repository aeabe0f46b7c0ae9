// Row sums on the CPU: rows split across OpenMP threads, each row reduced with a vectorised SIMD sum.
#include <cstdint>

// y[r] = sum of x[r, 0:d] for r in [0, rows).
void sum_last_dim_kernel(const float* __restrict x, float* __restrict y, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * d;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d; ++i) s += row[i];
    y[r] = s;
  }
}
