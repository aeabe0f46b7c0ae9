// Row argmax on the CPU: rows split across OpenMP threads; per row a vectorised max, then the first index holding it
// (torch's tie rule).
#include <bit>
#include <cmath>
#include <cstdint>

// y[r] = first i with x[r, i] == max(x[r, :]); a NaN anywhere in the row wins, like torch.argmax.
void argmax_last_dim_kernel(const float* __restrict x, int64_t* __restrict y, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float m = -INFINITY;
    bool nan = false;
#pragma omp simd reduction(max : m) reduction(|| : nan)
    for (int64_t i = 0; i < d; ++i) {
      m = xr[i] > m ? xr[i] : m;
      nan = nan || (xr[i] != xr[i]);
    }
    int64_t idx = 0;
    for (int64_t i = 0; i < d; ++i) {
      if (nan ? (xr[i] != xr[i]) : (xr[i] == m)) {
        idx = i;
        break;
      }
    }
    y[r] = idx;
  }
}
