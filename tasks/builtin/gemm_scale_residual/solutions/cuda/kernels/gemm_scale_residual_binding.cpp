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

void launch_gemm_scale_residual(const float* x, const float* w, const float* b, float* y, int m, int d, float scale,
                                cudaStream_t stream);  // gemm_scale_residual.cu

// (x @ weight^T + bias) * scale + x for x (M, D), weight (D, D), bias (D).
torch::Tensor gemm_scale_residual_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double scale) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(weight.is_cuda() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(bias.is_cuda() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && weight.size(0) == x.size(1) && weight.size(1) == x.size(1) &&
                  bias.numel() == x.size(1),
              "x (M, D), weight (D, D), bias (D)");
  const int64_t m = x.size(0), d = x.size(1);
  TORCH_CHECK(m < (1LL << 31) && d < (1LL << 31), "dimensions must fit in int32");
  auto y = torch::empty({m, d}, x.options());
  if (m > 0 && d > 0) {
    launch_gemm_scale_residual(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                               y.data_ptr<float>(), static_cast<int>(m), static_cast<int>(d), static_cast<float>(scale),
                               current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "gemm_scale_residual kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("gemm_scale_residual_forward", &gemm_scale_residual_forward, "(x @ W^T + b) * scale + x, TF32 (CUDA)");
}
REGISTER_BINDING(gemm_scale_residual, bind);
