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

void launch_affine_gelu_clamp(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t d,
                              float hi,
                              cudaStream_t stream);  // affine_gelu_clamp.cu

// clamp(gelu_tanh(x * w + b), max=hi) with w and b broadcast over the last dimension.
torch::Tensor affine_gelu_clamp_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double hi) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(w.is_cuda() && w.is_contiguous() && w.scalar_type() == torch::kFloat32,
              "w must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(b.is_cuda() && b.is_contiguous() && b.scalar_type() == torch::kFloat32,
              "b must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(w.numel() == d && b.numel() == d, "w and b must have d elements");
  auto y = torch::empty_like(x);
  if (rows > 0) {
    launch_affine_gelu_clamp(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), rows,
                             d, static_cast<float>(hi), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "affine_gelu_clamp kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("affine_gelu_clamp_forward", &affine_gelu_clamp_forward, "clamp(gelu(x * w + b)) (CUDA)");
}
REGISTER_BINDING(affine_gelu_clamp, bind);
