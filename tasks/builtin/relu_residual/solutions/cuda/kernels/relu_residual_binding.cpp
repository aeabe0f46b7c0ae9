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

void launch_relu_residual(const float* x, const float* res, float* y, int64_t n, cudaStream_t stream);

// relu(x) + residual for two contiguous float32 CUDA tensors of the same shape.
torch::Tensor relu_residual_forward(torch::Tensor x, torch::Tensor residual) {
  TORCH_CHECK(x.is_cuda() && residual.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(residual.is_contiguous() && residual.scalar_type() == torch::kFloat32, "residual: contiguous float32");
  TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual must have the same shape");
  auto y = torch::empty_like(x);
  if (x.numel() > 0) {
    launch_relu_residual(x.data_ptr<float>(), residual.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                         current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "relu_residual kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("relu_residual_forward", &relu_residual_forward, "relu(x) + residual (CUDA)");
}
REGISTER_BINDING(relu_residual, bind);
