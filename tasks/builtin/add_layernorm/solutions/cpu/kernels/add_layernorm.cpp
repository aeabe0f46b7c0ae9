// LayerNorm(x + residual) on the CPU: per row the sum h = x + residual is written to y, its mean and centred variance
// are computed from y (L1/L2 resident), then y is normalised in place.
#include <bit>
#include <cmath>
#include <cstdint>

// y[r, :] = LayerNorm(x[r, :] + res[r, :]) * w + b (biased variance).
void add_layernorm_kernel(const float* __restrict x, const float* __restrict res, const float* __restrict w,
                          const float* __restrict b, float* __restrict y, int64_t rows, int64_t d, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* rr = res + r * d;
    float* yr = y + r * d;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d; ++i) {
      const float h = xr[i] + rr[i];
      yr[i] = h;
      s += h;
    }
    const float mean = s / static_cast<float>(d);
    float q = 0.0f;
#pragma omp simd reduction(+ : q)
    for (int64_t i = 0; i < d; ++i) {
      const float c = yr[i] - mean;
      q += c * c;
    }
    const float rstd = 1.0f / std::sqrt(q / static_cast<float>(d) + eps);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = (yr[i] - mean) * rstd * w[i] + b[i];
  }
}
