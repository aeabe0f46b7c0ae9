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

void launch_softmax_scale_bias(const float* x, const float* bias, float* y, int64_t rows, int64_t d, float scale,
                               cudaStream_t stream);  // softmax_scale_bias.cu

// softmax(x * scale + bias) over the last dimension, bias of shape (d,).
torch::Tensor softmax_scale_bias_forward(torch::Tensor x, torch::Tensor bias, double scale) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(bias.is_cuda() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(bias.numel() == d, "bias must have d elements");
  auto y = torch::empty_like(x);
  if (rows > 0) {
    launch_softmax_scale_bias(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, d,
                              static_cast<float>(scale), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "softmax_scale_bias kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("softmax_scale_bias_forward", &softmax_scale_bias_forward,
        "softmax(x * scale + bias) per row on the GPU (CUDA)");
}
REGISTER_BINDING(softmax_scale_bias, bind);
