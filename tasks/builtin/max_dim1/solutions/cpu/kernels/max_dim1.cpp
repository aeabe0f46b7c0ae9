// Max over the middle dimension on the CPU: for each (batch, column block) a running maximum over the rows, vectorised
// across contiguous columns.
#include <bit>
#include <cmath>
#include <cstdint>

// y[i, j] = max_k x[i, k, j] for x of shape (b, m, n); NaN propagates like torch.max.
void max_dim1_kernel(const float* __restrict x, float* __restrict y, int64_t b, int64_t m, int64_t n) {
  constexpr int64_t kBlock = 256;  // columns per task: the running max stays in L1
  const int64_t col_blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < b; ++i) {
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t c0 = cb * kBlock;
      const int64_t len = n - c0 < kBlock ? n - c0 : kBlock;
      float acc[kBlock];
      const float* base = x + i * m * n + c0;
      for (int64_t j = 0; j < len; ++j) acc[j] = base[j];
      for (int64_t k = 1; k < m; ++k) {
        const float* row = base + k * n;
#pragma omp simd
        for (int64_t j = 0; j < len; ++j) acc[j] = (row[j] > acc[j] || row[j] != row[j]) ? row[j] : acc[j];
      }
      float* out = y + i * n + c0;
      for (int64_t j = 0; j < len; ++j) out[j] = acc[j];
    }
  }
}
