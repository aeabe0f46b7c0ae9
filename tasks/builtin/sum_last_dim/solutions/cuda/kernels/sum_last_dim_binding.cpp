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

void launch_sum_last_dim(const float* x, float* y, int64_t rows, int64_t d, cudaStream_t stream);  // sum_last_dim.cu

// Sums over the last dimension of a contiguous float32 CUDA tensor.
torch::Tensor sum_last_dim_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const int64_t d = x.size(-1);
  auto out_sizes = x.sizes().vec();
  out_sizes.pop_back();
  if (d == 0) return torch::zeros(out_sizes, x.options());
  auto y = torch::empty(out_sizes, x.options());
  if (y.numel() > 0) {
    launch_sum_last_dim(x.data_ptr<float>(), y.data_ptr<float>(), x.numel() / d, d, current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "sum_last_dim kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("sum_last_dim_forward", &sum_last_dim_forward, "sum over dim -1 (CUDA)");
}
REGISTER_BINDING(sum_last_dim, bind);
