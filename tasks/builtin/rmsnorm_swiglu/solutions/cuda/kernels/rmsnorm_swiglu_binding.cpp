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

void launch_rmsnorm_swiglu(const float* x, const float* gate, const float* w, float* y, int64_t rows, int64_t d,
                           float eps, cudaStream_t stream);  // rmsnorm_swiglu.cu

// rmsnorm(x) * weight * silu(gate) over the last dimension.
torch::Tensor rmsnorm_swiglu_forward(torch::Tensor x, torch::Tensor gate, torch::Tensor weight, double eps) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(gate.is_cuda() && gate.is_contiguous() && gate.scalar_type() == torch::kFloat32,
              "gate must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(weight.is_cuda() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(gate.sizes() == x.sizes() && weight.numel() == d, "shape mismatch");
  auto y = torch::empty_like(x);
  if (rows > 0) {
    launch_rmsnorm_swiglu(x.data_ptr<float>(), gate.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(),
                          rows, d, static_cast<float>(eps), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "rmsnorm_swiglu kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("rmsnorm_swiglu_forward", &rmsnorm_swiglu_forward, "rmsnorm(x) * weight * silu(gate) on the GPU (CUDA)");
}
REGISTER_BINDING(rmsnorm_swiglu, bind);
