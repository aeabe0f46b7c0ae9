// Direct 2-D convolution (stride 1, zero padding) on the CPU: one OpenMP work item per (sample, output channel); each
// output row accumulates shifted input rows times one weight, vectorised along the row.
#include <bit>
#include <cmath>
#include <cstdint>

// y[n, co, i, j] = b[co] + sum_{ci, r, c} w[co, ci, r, c] * x[n, ci, i + r - ph, j + c - pw] (zero outside x).
void conv2d_kernel(const float* __restrict x, const float* __restrict w, const float* __restrict b, float* __restrict y,
                   int64_t n, int64_t cin, int64_t h, int64_t wd, int64_t cout, int64_t kh, int64_t kw, int64_t ph,
                   int64_t pw, int64_t oh, int64_t ow) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t co = 0; co < cout; ++co) {
      float* out = y + (s * cout + co) * oh * ow;
      for (int64_t i = 0; i < oh * ow; ++i) out[i] = b[co];
      for (int64_t ci = 0; ci < cin; ++ci) {
        const float* plane = x + (s * cin + ci) * h * wd;
        const float* wk = w + (co * cin + ci) * kh * kw;
        for (int64_t r = 0; r < kh; ++r) {
          for (int64_t c = 0; c < kw; ++c) {
            const float wv = wk[r * kw + c];
            // output columns j whose input column j + c - pw lies inside [0, wd)
            const int64_t j0 = pw - c > 0 ? pw - c : 0;
            const int64_t j1 = wd + pw - c < ow ? wd + pw - c : ow;
            for (int64_t i = 0; i < oh; ++i) {
              const int64_t src = i + r - ph;
              if (src < 0 || src >= h) continue;
              const float* in = plane + src * wd + (c - pw);
              float* o = out + i * ow;
#pragma omp simd
              for (int64_t j = j0; j < j1; ++j) o[j] += wv * in[j];
            }
          }
        }
      }
    }
  }
}
