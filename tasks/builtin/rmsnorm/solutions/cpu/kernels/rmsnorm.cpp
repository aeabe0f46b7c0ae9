// RMSNorm on the CPU: per row a vectorised sum of squares, then a scale-by-weight pass.
#include <bit>
#include <cmath>
#include <cstdint>

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w.
void rmsnorm_kernel(const float* __restrict x, const float* __restrict w, float* __restrict y, int64_t rows, int64_t d,
                    float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float q = 0.0f;
#pragma omp simd reduction(+ : q)
    for (int64_t i = 0; i < d; ++i) q += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(q / static_cast<float>(d) + eps);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * w[i];
  }
}
