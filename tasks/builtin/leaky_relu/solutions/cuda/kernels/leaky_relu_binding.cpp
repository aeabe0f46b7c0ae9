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

void launch_leaky_relu(const float* x, float* y, int64_t n, cudaStream_t stream);  // defined in leaky_relu.cu

// Checks the input, allocates the output and launches the CUDA kernel on the current stream.
torch::Tensor leaky_relu_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  auto y = torch::empty_like(x);
  if (x.numel() > 0) {
    launch_leaky_relu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "leaky_relu kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("leaky_relu_forward", &leaky_relu_forward, "LeakyReLU (slope 0.01) on the GPU (CUDA)");
}
REGISTER_BINDING(leaky_relu, bind);
