// Direct 1-D convolution (stride 1, zero padding) on the CPU: one OpenMP work item per (sample, output channel); each
// tap adds a shifted input row times one weight, vectorised along the sequence.
#include <bit>
#include <cmath>
#include <cstdint>

// y[n, co, j] = b[co] + sum_{ci, t} w[co, ci, t] * x[n, ci, j + t - pad] (zero outside x).
void conv1d_kernel(const float* __restrict x, const float* __restrict w, const float* __restrict b, float* __restrict y,
                   int64_t n, int64_t cin, int64_t len, int64_t cout, int64_t k, int64_t pad, int64_t olen) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t co = 0; co < cout; ++co) {
      float* out = y + (s * cout + co) * olen;
      for (int64_t j = 0; j < olen; ++j) out[j] = b[co];
      for (int64_t ci = 0; ci < cin; ++ci) {
        const float* row = x + (s * cin + ci) * len;
        const float* wk = w + (co * cin + ci) * k;
        for (int64_t t = 0; t < k; ++t) {
          const float wv = wk[t];
          const int64_t j0 = pad - t > 0 ? pad - t : 0;
          const int64_t j1 = len + pad - t < olen ? len + pad - t : olen;
          const float* in = row + (t - pad);
#pragma omp simd
          for (int64_t j = j0; j < j1; ++j) out[j] += wv * in[j];
        }
      }
    }
  }
}
