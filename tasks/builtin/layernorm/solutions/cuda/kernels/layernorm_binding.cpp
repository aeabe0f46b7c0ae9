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

void launch_layernorm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t d, float eps,
                      cudaStream_t stream);  // layernorm.cu

// LayerNorm over the last dimension with weight and bias of shape (d,).
torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1);
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == d && weight.scalar_type() == torch::kFloat32, "bad weight");
  TORCH_CHECK(bias.is_contiguous() && bias.numel() == d && bias.scalar_type() == torch::kFloat32, "bad bias");
  auto y = torch::empty_like(x);
  if (x.numel() > 0) {
    launch_layernorm(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                     x.numel() / d, d, static_cast<float>(eps), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "layernorm kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("layernorm_forward", &layernorm_forward, "LayerNorm over dim -1 (CUDA)");
}
REGISTER_BINDING(layernorm, bind);
