// Row L2 normalisation on the CPU: per row a vectorised sum of squares, then a scaling pass.
#include <bit>
#include <cmath>
#include <cstdint>

// y[r, :] = x[r, :] / max(||x[r, :]||_2, eps).
void l2_normalize_kernel(const float* __restrict x, float* __restrict y, int64_t rows, int64_t d, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float q = 0.0f;
#pragma omp simd reduction(+ : q)
    for (int64_t i = 0; i < d; ++i) q += xr[i] * xr[i];
    const float norm = std::sqrt(q);
    const float inv = 1.0f / (norm > eps ? norm : eps);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv;
  }
}
