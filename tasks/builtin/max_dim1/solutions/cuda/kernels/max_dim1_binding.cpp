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

void launch_max_dim1(const float* x, float* y, int64_t bsz, int64_t m, int64_t n, cudaStream_t stream);  // max_dim1.cu

// max over dimension 1 of a contiguous float32 CUDA tensor of shape (B, M, N).
torch::Tensor max_dim1_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() == 3 && x.size(1) > 0, "x must be (B, M, N) with M > 0");
  auto y = torch::empty({x.size(0), x.size(2)}, x.options());
  if (y.numel() > 0) {
    launch_max_dim1(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1), x.size(2), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "max_dim1 kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) { m.def("max_dim1_forward", &max_dim1_forward, "max over dim 1 (CUDA)"); }
REGISTER_BINDING(max_dim1, bind);
