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

void launch_logsumexp(const float* x, float* y, int64_t rows, int64_t d, cudaStream_t stream);  // logsumexp.cu

// logsumexp over the last dimension of a contiguous float32 CUDA tensor.
torch::Tensor logsumexp_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto sizes = x.sizes().vec();
  sizes.pop_back();
  auto y = torch::empty(sizes, x.options());
  if (rows > 0) {
    launch_logsumexp(x.data_ptr<float>(), y.data_ptr<float>(), rows, d, current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "logsumexp kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("logsumexp_forward", &logsumexp_forward, "Row-wise log-sum-exp on the GPU (CUDA)");
}
REGISTER_BINDING(logsumexp, bind);
