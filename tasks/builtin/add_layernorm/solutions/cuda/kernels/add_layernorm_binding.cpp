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

void launch_add_layernorm(const float* x, const float* res, const float* w, const float* b, float* y, int64_t rows,
                          int64_t d, float eps, cudaStream_t stream);  // add_layernorm.cu

// LayerNorm(x + residual) over the last dimension with weight and bias of shape (d,).
torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, torch::Tensor bias,
                                    double eps) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(residual.is_cuda() && residual.is_contiguous() && residual.scalar_type() == torch::kFloat32,
              "residual must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(weight.is_cuda() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(bias.is_cuda() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(residual.sizes() == x.sizes() && weight.numel() == d && bias.numel() == d, "shape mismatch");
  auto y = torch::empty_like(x);
  if (rows > 0) {
    launch_add_layernorm(x.data_ptr<float>(), residual.data_ptr<float>(), weight.data_ptr<float>(),
                         bias.data_ptr<float>(), y.data_ptr<float>(), rows, d, static_cast<float>(eps),
                         current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "add_layernorm kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("add_layernorm_forward", &add_layernorm_forward, "LayerNorm(x + residual) on the GPU (CUDA)");
}
REGISTER_BINDING(add_layernorm, bind);
