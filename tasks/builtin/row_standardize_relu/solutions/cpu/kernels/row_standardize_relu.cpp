// relu((x - mean) / (std + eps)) per row on the CPU: rows split across OpenMP threads; per row a sum pass,
// a centred sum-of-squares pass (unbiased variance) and an output pass, all vectorised and L1/L2 resident.
#include <cmath>
#include <cstdint>

// y[r, :] = max((x[r, :] - mean) / (sqrt(sum((x - mean)^2) / (d - 1)) + eps), 0).
void row_standardize_relu_kernel(const float* __restrict x, float* __restrict y, int64_t rows, int64_t d, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d; ++i) s += xr[i];
    const float mean = s / static_cast<float>(d);
    float q = 0.0f;
#pragma omp simd reduction(+ : q)
    for (int64_t i = 0; i < d; ++i) {
      const float c = xr[i] - mean;
      q += c * c;
    }
    // d == 1 gives 0/0 = NaN like torch.std
    const float inv = 1.0f / (std::sqrt(q / static_cast<float>(d - 1)) + eps);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) {
      const float v = (xr[i] - mean) * inv;
      yr[i] = v > 0.0f ? v : 0.0f;
    }
  }
}
