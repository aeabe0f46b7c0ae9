// Batched matmul on the CPU: each b[i] packed into 64-column panels, 4 x 64 register-blocked micro-kernel.
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

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

// y[i] (m x n) = a[i] (m x k) @ b[i] (k x n) for i in [0, batch).
void bmm_kernel(const float* a, const float* b, float* y, int64_t batch, int64_t m, int64_t k, int64_t n) {
  std::vector<float> packed(static_cast<size_t>((n + kPanel - 1) / kPanel * kPanel * k));
  for (int64_t i = 0; i < batch; ++i) {
    pack_panels(b + i * k * n, k, n, /*ldk=*/n, /*ldn=*/1, packed.data());
    gemm_packed(a + i * m * k, packed.data(), m, k, n, y + i * m * n, [](float v, int64_t, int64_t) { return v; });
  }
}
