// Row prefix sums on the GPU: one block per row walks the row in tiles of THREADS * ITEMS floats; each tile is
// loaded with a warp-transposed (coalesced) CUB block load, scanned with cub::BlockScan, offset by the running
// carry of the previous tiles and stored back coalesced.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

namespace {

constexpr int kThreads = 256;
constexpr int kItems = 8;  // floats per thread per tile: 2048-float tiles

__global__ void __launch_bounds__(kThreads)
    cumsum_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t d) {
  using Load = cub::BlockLoad<float, kThreads, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Scan = cub::BlockScan<float, kThreads>;
  using Store = cub::BlockStore<float, kThreads, kItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Scan::TempStorage scan;
    typename Store::TempStorage store;
  } tmp;
  constexpr int kTile = kThreads * kItems;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * d;
    float* yr = y + row * d;
    float carry = 0.0f;
    for (int64_t t0 = 0; t0 < d; t0 += kTile) {
      const int valid = static_cast<int>(d - t0 < kTile ? d - t0 : kTile);
      float items[kItems];
      Load(tmp.load).Load(xr + t0, items, valid, 0.0f);
      __syncthreads();
      float total;
      Scan(tmp.scan).InclusiveSum(items, items, total);
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kItems; ++k) items[k] += carry;
      Store(tmp.store).Store(yr + t0, items, valid);
      __syncthreads();
      carry += total;
    }
  }
}

}  // namespace

// y[r, i] = sum_{j <= i} x[r, j] for `rows` rows of length d.
void launch_cumsum(const float* x, float* y, int64_t rows, int64_t d, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>(rows < 2147483647LL ? rows : 2147483647LL);
  cumsum_rows_kernel<<<grid, kThreads, 0, stream>>>(x, y, rows, d);
}
