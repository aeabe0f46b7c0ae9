// clamp(gelu_tanh(x * w + b), max=hi) on the CPU in one vectorised pass.
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

// y[r, c] = min(gelu_tanh(x[r, c] * w[c] + b[c]), hi); gelu_tanh(v) = v * sigmoid(2 sqrt(2/pi) (v + 0.044715 v^3)).
void affine_gelu_clamp_kernel(const float* __restrict x, const float* __restrict w, const float* __restrict b,
                              float* __restrict y, int64_t rows, int64_t d, float hi) {
  constexpr float kTwoSqrt2OverPi = 2.0f * 0.7978845608028654f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) {
      const float v = std::fma(xr[c], w[c], b[c]);
      const float u2 = kTwoSqrt2OverPi * std::fma(0.044715f * v, v * v, v);
      const float g = v / (1.0f + vexp(-u2));
      yr[c] = g < hi ? g : hi;
    }
  }
}
