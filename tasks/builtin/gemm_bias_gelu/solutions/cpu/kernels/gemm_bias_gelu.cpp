// gelu(x @ W^T + b) on the CPU: W^T packed into 64-column panels, 4 x 64 register-blocked micro-kernel, bias + erf-GELU
// applied while storing.
#include <bit>
#include <cmath>
#include <cstddef>
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
namespace {

constexpr int64_t kPanel = 64;  // output columns per packed panel (4 AVX-512 or 8 AVX2 vectors)

// Packs B (k x n, element (kk, j) at b[kk * ldk + j * ldn]) into panels of 64 columns: panel p holds
// B[:, 64p : 64p + 64] row by row (zero padded), so the micro-kernel reads it contiguously.
void pack_panels(const float* b, int64_t k, int64_t n, int64_t ldk, int64_t ldn, float* packed) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = packed + p * k * kPanel;
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < kPanel; ++j) {
        const int64_t col = p * kPanel + j;
        dst[kk * kPanel + j] = col < n ? b[kk * ldk + col * ldn] : 0.0f;
      }
    }
  }
}

// acc[r][:] = sum_k a[r, k] * panel[k, :] for R rows of A (row stride lda); returns through acc.
template <int R>
inline void micro_kernel(const float* __restrict a, int64_t lda, int64_t k, const float* __restrict panel,
                         float (&acc)[R][kPanel]) {
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < kPanel; ++j) acc[r][j] = 0.0f;
  for (int64_t kk = 0; kk < k; ++kk) {
    const float* bk = panel + kk * kPanel;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float av = a[r * lda + kk];
#pragma omp simd
      for (int64_t j = 0; j < kPanel; ++j) acc[r][j] += av * bk[j];
    }
  }
}

// C (m x n) = epilogue(A (m x k) @ packed B): every (panel, 4-row block) pair is one OpenMP work item.
template <class Epilogue>
void gemm_packed(const float* a, const float* packed, int64_t m, int64_t k, int64_t n, float* c, Epilogue ep) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  const int64_t row_blocks = (m + 3) / 4;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
      const float* panel = packed + p * k * kPanel;
      const int64_t col0 = p * kPanel;
      const int64_t ncols = n - col0 < kPanel ? n - col0 : kPanel;
      for (int64_t row0 = rb * 4; row0 < m && row0 < rb * 4 + 4;) {
        if (row0 + 4 <= m) {
          float acc[4][kPanel];
          micro_kernel<4>(a + row0 * k, k, k, panel, acc);
          for (int r = 0; r < 4; ++r)
            for (int64_t j = 0; j < ncols; ++j) c[(row0 + r) * n + col0 + j] = ep(acc[r][j], row0 + r, col0 + j);
          row0 += 4;
        } else {
          float acc[1][kPanel];
          micro_kernel<1>(a + row0 * k, k, k, panel, acc);
          for (int64_t j = 0; j < ncols; ++j) c[row0 * n + col0 + j] = ep(acc[0][j], row0, col0 + j);
          row0 += 1;
        }
      }
    }
  }
}

}  // namespace

// erf(z) with |error| < 1.5e-7 (Abramowitz-Stegun 7.1.26).
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

// y (m x n) = gelu(x (m x k) @ w^T + b), w stored (n x k) row-major like nn.Linear.
void gemm_bias_gelu_kernel(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t k, int64_t n) {
  std::vector<float> packed(static_cast<size_t>((n + kPanel - 1) / kPanel * kPanel * k));
  pack_panels(w, k, n, /*ldk=*/1, /*ldn=*/k, packed.data());
  gemm_packed(x, packed.data(), m, k, n, y, [b](float v, int64_t, int64_t col) {
    const float h = v + b[col];
    return 0.5f * h * (1.0f + verf(h * 0.70710678118654752f));
  });
}
