// softmax(x * scale + bias) per row on the CPU: the logits are written to y while taking the max, then exponentiated
// and summed in place, then scaled.
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

// y[r, :] = softmax(x[r, :] * scale + bias).
void softmax_scale_bias_kernel(const float* __restrict x, const float* __restrict bias, float* __restrict y,
                               int64_t rows, int64_t d, float scale) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < d; ++i) {
      const float z = std::fma(xr[i], scale, bias[i]);
      yr[i] = z;
      m = z > m ? z : m;
    }
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d; ++i) {
      const float e = vexp(yr[i] - m);
      yr[i] = e;
      s += e;
    }
    const float inv = 1.0f / s;
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] *= inv;
  }
}
