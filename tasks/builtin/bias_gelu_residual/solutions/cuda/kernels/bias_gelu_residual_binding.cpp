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

void launch_bias_gelu_residual(const float* x, const float* bias, const float* res, float* y, int64_t rows, int64_t d,
                               cudaStream_t stream);  // bias_gelu_residual.cu

// gelu(x + bias) + residual, bias broadcast over the last dimension.
torch::Tensor bias_gelu_residual_forward(torch::Tensor x, torch::Tensor bias, torch::Tensor residual) {
  TORCH_CHECK(x.is_cuda() && bias.is_cuda() && residual.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(residual.is_contiguous() && residual.scalar_type() == torch::kFloat32 && residual.sizes() == x.sizes(),
              "residual must be contiguous float32 shaped like x");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1);
  TORCH_CHECK(bias.is_contiguous() && bias.numel() == d && bias.scalar_type() == torch::kFloat32, "bad bias");
  auto y = torch::empty_like(x);
  if (x.numel() > 0) {
    launch_bias_gelu_residual(x.data_ptr<float>(), bias.data_ptr<float>(), residual.data_ptr<float>(),
                              y.data_ptr<float>(), x.numel() / d, d, current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "bias_gelu_residual kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("bias_gelu_residual_forward", &bias_gelu_residual_forward, "gelu(x + bias) + residual (CUDA)");
}
REGISTER_BINDING(bias_gelu_residual, bind);
