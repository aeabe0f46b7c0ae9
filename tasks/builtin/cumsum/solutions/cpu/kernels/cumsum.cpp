// Row prefix sums on the CPU: rows split across OpenMP threads, a sequential fp32 scan per row (the same summation
// order as eager PyTorch's CPU kernel).
#include <bit>
#include <cmath>
#include <cstdint>

// y[r, i] = x[r, 0] + ... + x[r, i].
void cumsum_kernel(const float* __restrict x, float* __restrict y, int64_t rows, int64_t d) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float s = 0.0f;
    for (int64_t i = 0; i < d; ++i) {
      s += xr[i];
      yr[i] = s;
    }
  }
}
