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

void launch_glu(const float* x, float* y, int64_t rows, int64_t h, cudaStream_t stream);  // glu.cu

// a * sigmoid(b) with (a, b) = x.chunk(2, dim=-1).
torch::Tensor glu_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "last dimension must be even");
  const int64_t d = x.size(-1);
  auto sizes = x.sizes().vec();
  sizes.back() = d / 2;
  auto y = torch::empty(sizes, x.options());
  if (y.numel() > 0) {
    launch_glu(x.data_ptr<float>(), y.data_ptr<float>(), x.numel() / d, d / 2, current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "glu kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) { m.def("glu_forward", &glu_forward, "a * sigmoid(b) (CUDA)"); }
REGISTER_BINDING(glu, bind);
