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

void launch_l2_normalize(const float* x, float* y, int64_t rows, int64_t d, float eps,
                         cudaStream_t stream);  // l2_normalize.cu

// Normalises each row of a contiguous float32 CUDA tensor to unit L2 norm.
torch::Tensor l2_normalize_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto y = torch::empty_like(x);
  if (rows > 0) {
    launch_l2_normalize(x.data_ptr<float>(), y.data_ptr<float>(), rows, d, 1e-12f, current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "l2_normalize kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("l2_normalize_forward", &l2_normalize_forward, "Row L2 normalisation on the GPU (CUDA)");
}
REGISTER_BINDING(l2_normalize, bind);
