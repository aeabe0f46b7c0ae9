// LayerNorm on the CPU: rows split across OpenMP threads; per row a sum pass, a centred sum-of-squares pass
// (two-pass variance, numerically safe) and a normalise+affine pass, all vectorised.
#include <cmath>
#include <cstdint>

// y[r, :] = (x[r, :] - mean) * rsqrt(var + eps) * w + b, biased variance as in torch.nn.LayerNorm.
void layernorm_kernel(const float* __restrict x, const float* __restrict w, const float* __restrict b,
                      float* __restrict y, int64_t rows, int64_t d, float eps) {
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
      float c = xr[i] - mean;
      q += c * c;
    }
    const float rstd = 1.0f / std::sqrt(q / static_cast<float>(d) + eps);
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
  }
}
