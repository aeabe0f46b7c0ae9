// gelu(x + bias) + residual on the CPU in one vectorised pass, with a vectorisable erf (Abramowitz-Stegun 7.1.26).
#include <bit>
#include <cmath>
#include <cstdint>

// exp(x) without a libm call (so loops vectorise): Cody-Waite range reduction + Cephes polynomial, ~2 ulp.
static inline float vexp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  float n = x * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to the nearest integer
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p * r, r, r) + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// erf(z) with |error| < 1.5e-7: 1 - poly(t) * exp(-z^2), t = 1 / (1 + p|z|), sign restored.
static inline float verf(float z) {
  const float a = z < 0.0f ? -z : z;
  const float t = 1.0f / std::fma(0.3275911f, a, 1.0f);
  float p = 1.061405429f;
  p = std::fma(p, t, -1.453152027f);
  p = std::fma(p, t, 1.421413741f);
  p = std::fma(p, t, -0.284496736f);
  p = std::fma(p, t, 0.254829592f);
  const float e = 1.0f - p * t * vexp(-a * a);
  return z < 0.0f ? -e : e;
}

// y[r, c] = gelu(x[r, c] + bias[c]) + res[r, c].
void bias_gelu_residual_kernel(const float* __restrict x, const float* __restrict bias, const float* __restrict res,
                               float* __restrict y, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    const float* rr = res + r * d;
    float* yr = y + r * d;
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) {
      const float v = xr[c] + bias[c];
      yr[c] = 0.5f * v * (1.0f + verf(v * 0.70710678118654752f)) + rr[c];
    }
  }
}
