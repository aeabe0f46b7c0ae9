// GEMM + bias + ReLU on the CPU: W is packed once per call into column panels of W^T (K x 64, zero padded),
// then each OpenMP task computes a 4 x 64 block of y with the accumulators held in vector registers.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kPanel = 64;  // output columns per panel (4 AVX-512 or 8 AVX2 vectors)

// acc[r][j] = sum_k x[r, k] * wt[k, j] for R rows of x and one packed panel; then bias + ReLU into y.
template <int R>
void micro_kernel(const float* __restrict x, int64_t k_dim, const float* __restrict panel, const float* __restrict bias,
                  float* __restrict y, int64_t ldy, int64_t ncols) {
  float acc[R][kPanel] = {};
  for (int64_t k = 0; k < k_dim; ++k) {
    const float* wk = panel + k * kPanel;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const float a = x[r * k_dim + k];
#pragma omp simd
      for (int64_t j = 0; j < kPanel; ++j) acc[r][j] += a * wk[j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int64_t j = 0; j < ncols; ++j) {
      const float v = acc[r][j] + bias[j];
      y[r * ldy + j] = v > 0.0f ? v : 0.0f;
    }
}

}  // namespace

// y (m x n) = relu(x (m x k) @ w^T + b), w stored as (n x k) row-major like nn.Linear.
void gemm_bias_relu_kernel(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t k, int64_t n) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  std::vector<float> packed(static_cast<size_t>(panels * k * kPanel));
  // packed[p][kk][j] = w[p*64 + j][kk] (0 beyond n)
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = packed.data() + p * k * kPanel;
    for (int64_t j = 0; j < kPanel; ++j) {
      const int64_t col = p * kPanel + j;
      for (int64_t kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = col < n ? w[col * k + kk] : 0.0f;
    }
  }
  const int64_t row_blocks = (m + 3) / 4;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
      const float* panel = packed.data() + p * k * kPanel;
      const int64_t col0 = p * kPanel;
      const int64_t ncols = n - col0 < kPanel ? n - col0 : kPanel;
      const int64_t row0 = rb * 4;
      if (row0 + 4 <= m) {
        micro_kernel<4>(x + row0 * k, k, panel, b + col0, y + row0 * n + col0, n, ncols);
      } else {
        for (int64_t r = row0; r < m; ++r) micro_kernel<1>(x + r * k, k, panel, b + col0, y + r * n + col0, n, ncols);
      }
    }
  }
}
