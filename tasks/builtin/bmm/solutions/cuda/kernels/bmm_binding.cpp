#include "binding_registry.h"

// The current PyTorch stream where the CUDA build of the headers is present; the legacy default stream
// otherwise (CPU-only PyTorch headers lack c10/cuda's generated config, so a syntax check still compiles).
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDAStream.h>
static cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream(); }
#else
#include <cuda_runtime.h>
static cudaStream_t current_stream() { return nullptr; }
#endif

void launch_bmm(const float* a, const float* b, float* y, int batch, int m, int n, int k,
                cudaStream_t stream);  // bmm.cu

// bmm(a, b) for a (B, M, K), b (B, K, N).
torch::Tensor bmm_forward(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && a.is_contiguous() && a.scalar_type() == torch::kFloat32,
              "a must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(b.is_cuda() && b.is_contiguous() && b.scalar_type() == torch::kFloat32,
              "b must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
              "a (B, M, K), b (B, K, N)");
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  TORCH_CHECK(batch < (1LL << 31) && m < (1LL << 31) && n < (1LL << 31) && k < (1LL << 31),
              "dimensions must fit in int32");
  auto y = torch::empty({batch, m, n}, a.options());
  if (y.numel() > 0) {
    launch_bmm(a.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), static_cast<int>(batch),
               static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "bmm kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("bmm_forward", &bmm_forward, "batched matmul, 3xTF32 tensor cores (fp32-level accuracy, CUDA)");
}
REGISTER_BINDING(bmm, bind);
