// Batched matmul y[i] = a[i] @ b[i] on the GPU with tensor cores at fp32-level accuracy (one launch for the whole
// batch).
//
// Precision scheme, 3xTF32: a TF32 tensor-core product only sees the top 10 mantissa bits of each operand, so each
// fp32 element v of an operand fragment is split into two exact TF32 values, big = v with its low 13 mantissa bits
// cleared and small = v - big (exact in fp32, |v - big| < 2^-10 |v|) rounded to the nearest TF32. Every product
// is accumulated as a_small*b_big + a_big*b_small + a_big*b_big: three mma_sync per fragment pair into the same
// fp32 accumulators, the a_small*b_small term dropped. The dropped term (<= 2^-20 |a*b|) and the rounding of the
// two small parts (<= 2^-21 |a*b| each) bound the error of one product by ~2^-19 |a*b| (much less on average),
// so the sums match an fp32 matmul to ~1e-6 relative; plain TF32 is only good to ~1e-3 per product.
// The split runs on each fragment right after it is loaded from shared memory (a fragment of a is split once
// and used against both b fragments of the warp tile, a b fragment against all four a fragments). Inf and the
// usual NaNs survive the split in the big part and propagate as in fp32.
//
// Tiling: block tile 128 x 128 x 32, 8 warps each computing a 64 x 32 piece with wmma m16n16k8 TF32 fragments;
// the a tile (K-contiguous) and the b tile (N-contiguous) are streamed into shared memory with cp.async,
// double-buffered so the next tile loads while the current one is multiplied; blockIdx.y is the batch index.
// Shapes the fast path cannot take (K or N % 4 != 0, unaligned, K == 0) use a plain fp32 kernel.
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

namespace {

using namespace nvcuda;

constexpr int BM = 128, BN = 128, BK = 32;
constexpr int WARPS_M = 2, WARPS_N = 4;
constexpr int WM = BM / WARPS_M;  // 64 rows per warp
constexpr int WN = BN / WARPS_N;  // 32 columns per warp
constexpr int FM = WM / 16, FN = WN / 16;
constexpr int kThreads = WARPS_M * WARPS_N * 32;
constexpr int LDS = BK + 4;  // padded a-tile row (floats): rows stay 16-byte aligned, fragment reads hit 32 banks
constexpr int LDB = BN + 8;  // padded b-tile row: k rows 8 banks apart, so a fragment's 4 k x 8 n reads don't clash
constexpr int kStageFloats = BM * LDS + BK * LDB;
constexpr int kSmemBytes = 2 * kStageFloats * static_cast<int>(sizeof(float));
constexpr int kGroupM = 8;
// cp.async assignment: each thread copies 4 float4 of the a tile (rows a_r + i * kARowStep) and 4 of the b tile
// (rows b_r + i * kBRowStep), the same columns every k tile.
constexpr int kACopies = (BM * BK / 4) / kThreads, kARowStep = kThreads / (BK / 4);
constexpr int kBCopies = (BK * BN / 4) / kThreads, kBRowStep = kThreads / (BN / 4);
static_assert((BM * BK / 4) % kThreads == 0 && (BK * BN / 4) % kThreads == 0, "tile copies must divide evenly");
static_assert(kThreads % (BK / 4) == 0 && kThreads % (BN / 4) == 0, "copy rows must be whole");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;

constexpr unsigned kTf32Mask = 0xffffe000u;  // sign, 8 exponent bits, 10 mantissa bits

// 3xTF32 split of a freshly loaded fragment. On entry big holds fp32 values v; on return big = v truncated to TF32
// (inf and NaN kept) and small = v - big (exact in fp32) rounded to the nearest TF32, ties away from zero as
// cvt.rna.tf32 does (add half a TF32 ulp to the magnitude bits, then clear the low 13 bits). For finite v, small
// is finite and far below the overflow range, so the add cannot carry into an all-ones exponent; for non-finite v
// whatever small becomes is irrelevant, since big already carries the inf/NaN into the sum.
template <class Frag>
__device__ __forceinline__ void split_tf32(Frag& big, Frag& small) {
#pragma unroll
  for (int t = 0; t < big.num_elements; ++t) {
    const float v = big.x[t];
    const float hi = __uint_as_float(__float_as_uint(v) & kTf32Mask);
    const float rest = v - hi;
    big.x[t] = hi;
    small.x[t] = __uint_as_float((__float_as_uint(rest) + 0x1000u) & kTf32Mask);
  }
}

// load_matrix_sync for the two tf32 operand fragments, issued as the same PTX wmma.load but with the .shared
// state space and a 32-bit shared address: the C++ API passes a generic pointer, which costs a 64-bit address
// computation per element and generic loads. Register t of the PTX instruction is fragment element x[t], exactly
// as in load_matrix_sync, so the fragments feed wmma::mma_sync unchanged. ldm is in elements.
template <int LDM>
__device__ __forceinline__ void load_a_shared(FragA& f, unsigned addr) {
  unsigned r0, r1, r2, r3;
  asm volatile("wmma.load.a.sync.aligned.row.m16n16k8.shared.tf32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr), "r"(LDM));
  f.x[0] = __uint_as_float(r0);
  f.x[1] = __uint_as_float(r1);
  f.x[2] = __uint_as_float(r2);
  f.x[3] = __uint_as_float(r3);
}
template <int LDM>
__device__ __forceinline__ void load_b_shared(FragB& f, unsigned addr) {
  unsigned r0, r1, r2, r3;
  asm volatile("wmma.load.b.sync.aligned.row.m16n16k8.shared.tf32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr), "r"(LDM));
  f.x[0] = __uint_as_float(r0);
  f.x[1] = __uint_as_float(r1);
  f.x[2] = __uint_as_float(r2);
  f.x[3] = __uint_as_float(r3);
}
static_assert(FragA::num_elements == 4 && FragB::num_elements == 4, "tf32 m16n16k8 operand fragments hold 4");

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool pred) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int src_bytes = pred ? 16 : 0;  // 0 -> the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// C[z] (M x N) = A[z] (M x K) @ Bm[z] (K x N), K % 4 == 0, N % 4 == 0, K > 0, 16-byte aligned A and Bm;
// z = blockIdx.y.
__global__ void __launch_bounds__(kThreads, 2)
    bmm_3xtf32_kernel(const float* __restrict__ A, const float* __restrict__ Bm, float* __restrict__ C, int M, int N,
                      int K) {
  extern __shared__ __align__(128) float smem[];
  A += static_cast<int64_t>(blockIdx.y) * M * K;
  Bm += static_cast<int64_t>(blockIdx.y) * K * N;
  C += static_cast<int64_t>(blockIdx.y) * M * N;
  // grouped block order: kGroupM block-rows walk the block-columns together
  const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
  const int per_group = kGroupM * grid_n;
  const int group = blockIdx.x / per_group;
  const int first_m = group * kGroupM;
  const int group_rows = min(grid_m - first_m, kGroupM);
  const int in_group = blockIdx.x % per_group;
  const int m0 = (first_m + in_group % group_rows) * BM;
  const int n0 = (in_group / group_rows) * BN;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp / WARPS_N, wn = warp % WARPS_N;

  // Per-thread copy state: source pointers advance by one k tile per step; rows/columns past the matrix edge
  // are zero-filled (cp.async then gets the matrix base as its source, never an address outside the matrix).
  const int a_r = threadIdx.x / (BK / 4), a_c = (threadIdx.x % (BK / 4)) * 4;
  const int b_r = threadIdx.x / (BN / 4), b_c = (threadIdx.x % (BN / 4)) * 4;
  const int a_rows_left = M - m0 - a_r;  // copy i is inside the matrix when i * kARowStep < a_rows_left
  const bool b_col_ok = n0 + b_c < N;
  const int64_t a_step = static_cast<int64_t>(kARowStep) * K, b_step = static_cast<int64_t>(kBRowStep) * N;
  const float* a_src = A + static_cast<int64_t>(m0 + a_r) * K + a_c;
  const float* b_src = Bm + static_cast<int64_t>(b_r) * N + n0 + b_c;
  float* const sA_dst = smem + a_r * LDS + a_c;
  float* const sB_dst = smem + BM * LDS + b_r * LDB + b_c;

  // Starts the copy of k tile k0 (A[m0:+BM, k0:+BK] and Bm[k0:+BK, n0:+BN]) into stage `stage`.
  auto load_tiles = [&](int stage, int k0) {
    const int so = stage * kStageFloats;
    const bool a_col_ok = a_c + k0 < K;
#pragma unroll
    for (int i = 0; i < kACopies; ++i) {
      const bool ok = a_col_ok && i * kARowStep < a_rows_left;
      cp_async16(sA_dst + so + i * kARowStep * LDS, ok ? a_src + i * a_step : A, ok);
    }
#pragma unroll
    for (int i = 0; i < kBCopies; ++i) {
      const bool ok = b_col_ok && k0 + b_r + i * kBRowStep < K;
      cp_async16(sB_dst + so + i * kBRowStep * LDB, ok ? b_src + i * b_step : Bm, ok);
    }
    a_src += BK;
    b_src += static_cast<int64_t>(BK) * N;
  };

  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[FM][FN];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  const unsigned smem_base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int k_tiles = (K + BK - 1) / BK;
  load_tiles(0, 0);
  cp_async_commit();
  for (int kt = 0; kt < k_tiles; ++kt) {
    // shared byte addresses of this warp's a rows and b columns in the current stage
    const unsigned sA = smem_base + static_cast<unsigned>(((kt & 1) * kStageFloats + wm * WM * LDS) * 4);
    const unsigned sB = smem_base + static_cast<unsigned>(((kt & 1) * kStageFloats + BM * LDS + wn * WN) * 4);
    if (kt + 1 < k_tiles) {  // prefetch the next tile into the other buffer
      load_tiles((kt + 1) & 1, (kt + 1) * BK);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      FragB b_big[FN], b_small[FN];
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        load_b_shared<LDB>(b_big[j], sB + (kk * LDB + j * 16) * 4);
        split_tf32(b_big[j], b_small[j]);
      }
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        FragA a_big, a_small;
        load_a_shared<LDS>(a_big, sA + (i * 16 * LDS + kk) * 4);
        split_tf32(a_big, a_small);
#pragma unroll
        for (int j = 0; j < FN; ++j) {  // the two small cross terms first, then the big product
          wmma::mma_sync(acc[i][j], a_small, b_big[j], acc[i][j]);
          wmma::mma_sync(acc[i][j], a_big, b_small[j], acc[i][j]);
          wmma::mma_sync(acc[i][j], a_big, b_big[j], acc[i][j]);
        }
      }
    }
    __syncthreads();  // the buffer just read is overwritten by the next iteration's prefetch
  }

  // Epilogue: each warp stages one 16x16 accumulator at a time in its own shared-memory patch.
  float* patch = smem + warp * 256;
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      wmma::store_matrix_sync(patch, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int row0 = m0 + wm * WM + i * 16, col0 = n0 + wn * WN + j * 16;
#pragma unroll
      for (int e = lane; e < 256; e += 32) {
        const int r = row0 + (e >> 4), c = col0 + (e & 15);
        if (r < M && c < N) C[static_cast<int64_t>(r) * N + c] = patch[e];
      }
      __syncwarp();
    }
  }
}

// Fallback for any shape / alignment: 16 x 16 fp32 shared-memory tiles, z = blockIdx.z.
__global__ void bmm_simple_kernel(const float* __restrict__ A, const float* __restrict__ Bm, float* __restrict__ C,
                                  int M, int N, int K) {
  __shared__ float sA[16][17], sB[16][17];
  A += static_cast<int64_t>(blockIdx.z) * M * K;
  Bm += static_cast<int64_t>(blockIdx.z) * K * N;
  C += static_cast<int64_t>(blockIdx.z) * M * N;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    sA[ty][tx] = (row < M && k0 + tx < K) ? A[static_cast<int64_t>(row) * K + k0 + tx] : 0.0f;
    sB[ty][tx] = (k0 + ty < K && col < N) ? Bm[static_cast<int64_t>(k0 + ty) * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) acc = fmaf(sA[ty][kk], sB[kk][tx], acc);
    __syncthreads();
  }
  if (row < M && col < N) C[static_cast<int64_t>(row) * N + col] = acc;
}

}  // namespace

// y[z] (m x n) = a[z] (m x k) @ b[z] (k x n) for z in [0, batch).
void launch_bmm(const float* a, const float* b, float* y, int batch, int m, int n, int k, cudaStream_t stream) {
  const bool aligned = ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
  if (aligned && k % 4 == 0 && n % 4 == 0 && k > 0 && batch < 65536) {
    cudaFuncSetAttribute(bmm_3xtf32_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    const dim3 grid(((m + BM - 1) / BM) * ((n + BN - 1) / BN), batch);
    bmm_3xtf32_kernel<<<grid, kThreads, kSmemBytes, stream>>>(a, b, y, m, n, k);
  } else {
    for (int z0 = 0; z0 < batch; z0 += 65535) {
      const int nb = batch - z0 < 65535 ? batch - z0 : 65535;
      const dim3 grid((n + 15) / 16, (m + 15) / 16, nb);
      bmm_simple_kernel<<<grid, dim3(16, 16), 0, stream>>>(a + static_cast<int64_t>(z0) * m * k,
                                                           b + static_cast<int64_t>(z0) * k * n,
                                                           y + static_cast<int64_t>(z0) * m * n, m, n, k);
    }
  }
}
