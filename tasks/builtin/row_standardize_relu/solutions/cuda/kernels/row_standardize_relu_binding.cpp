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

void launch_row_standardize_relu(const float* x, float* y, int64_t rows, int64_t d, float eps,
                                 cudaStream_t stream);  // row_standardize_relu.cu

// relu((x - mean) / (std + eps)) over the last dimension of a contiguous float32 CUDA tensor.
torch::Tensor row_standardize_relu_forward(torch::Tensor x, double eps) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  auto y = torch::empty_like(x);
  const int64_t d = x.size(-1);
  if (x.numel() > 0) {
    launch_row_standardize_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel() / d, d, static_cast<float>(eps),
                                current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "row_standardize_relu kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("row_standardize_relu_forward", &row_standardize_relu_forward, "relu(row standardise) (CUDA)");
}
REGISTER_BINDING(row_standardize_relu, bind);
