// Batch normalisation with batch statistics on the CPU: per channel a sum pass and a centred sum-of-squares pass over
// its N contiguous (H*W) planes, then an affine write pass; channels are split across OpenMP threads.
#include <bit>
#include <cmath>
#include <cstdint>

// y[:, ch] = (x[:, ch] - mean_ch) / sqrt(var_ch + eps) * w[ch] + b[ch], biased variance over (N, H, W).
void batchnorm_train_kernel(const float* __restrict x, const float* __restrict w, const float* __restrict b,
                            float* __restrict y, int64_t n, int64_t c, int64_t hw, float eps) {
  const float count = static_cast<float>(n * hw);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    float sum = 0.0f;
    for (int64_t s = 0; s < n; ++s) {
      const float* plane = x + (s * c + ch) * hw;
      float part = 0.0f;
#pragma omp simd reduction(+ : part)
      for (int64_t i = 0; i < hw; ++i) part += plane[i];
      sum += part;
    }
    const float mean = sum / count;
    float q = 0.0f;
    for (int64_t s = 0; s < n; ++s) {
      const float* plane = x + (s * c + ch) * hw;
      float part = 0.0f;
#pragma omp simd reduction(+ : part)
      for (int64_t i = 0; i < hw; ++i) {
        const float t = plane[i] - mean;
        part += t * t;
      }
      q += part;
    }
    const float scale = w[ch] / std::sqrt(q / count + eps);
    const float shift = b[ch] - mean * scale;
    for (int64_t s = 0; s < n; ++s) {
      const float* plane = x + (s * c + ch) * hw;
      float* out = y + (s * c + ch) * hw;
#pragma omp simd
      for (int64_t i = 0; i < hw; ++i) out[i] = std::fma(plane[i], scale, shift);
    }
  }
}
