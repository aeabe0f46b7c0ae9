// Scaled dot-product attention on the CPU: exact softmax(q k^T / sqrt(d)) v per query row (no S x S matrix is stored).
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

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

// out[b, h, i, :] = sum_j p_j v[b, h, j, :], p = softmax_j(q_i . k_j * scale) over j < limit(i); one OpenMP work item
// per (batch*head, block of 16 queries); scores live in a per-thread buffer, dot products and the weighted sum of
// v rows are vectorised over the head dimension.
void attention_kernel(const float* __restrict q, const float* __restrict k, const float* __restrict v,
                      float* __restrict out, int64_t bh, int64_t s, int64_t d, float scale, bool causal) {
  constexpr int64_t kQBlock = 16;
  const int64_t q_blocks = (s + kQBlock - 1) / kQBlock;
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(s));
#pragma omp for collapse(2) schedule(static)
    for (int64_t z = 0; z < bh; ++z) {
      for (int64_t qb = 0; qb < q_blocks; ++qb) {
        const float* kz = k + z * s * d;
        const float* vz = v + z * s * d;
        for (int64_t i = qb * kQBlock; i < s && i < (qb + 1) * kQBlock; ++i) {
          const float* qi = q + (z * s + i) * d;
          float* oi = out + (z * s + i) * d;
          const int64_t limit = causal ? i + 1 : s;
          float m = -INFINITY;
          for (int64_t j = 0; j < limit; ++j) {
            const float* kj = kz + j * d;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t t = 0; t < d; ++t) dot += qi[t] * kj[t];
            dot *= scale;
            scores[j] = dot;
            m = dot > m ? dot : m;
          }
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < limit; ++j) {
            const float e = vexp(scores[j] - m);
            scores[j] = e;
            sum += e;
          }
          const float inv = 1.0f / sum;
#pragma omp simd
          for (int64_t t = 0; t < d; ++t) oi[t] = 0.0f;
          for (int64_t j = 0; j < limit; ++j) {
            const float p = scores[j] * inv;
            const float* vj = vz + j * d;
#pragma omp simd
            for (int64_t t = 0; t < d; ++t) oi[t] += p * vj[t];
          }
        }
      }
    }
  }
}

// scaled dot-product attention for q, k, v of shape (bh, s, d).
void sdpa_kernel(const float* q, const float* k, const float* v, float* out, int64_t bh, int64_t s, int64_t d) {
  attention_kernel(q, k, v, out, bh, s, d, 1.0f / std::sqrt(static_cast<float>(d)), false);
}
