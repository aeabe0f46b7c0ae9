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

void launch_batchnorm_train(const float* x, const float* w, const float* b, float* y, float* part, int64_t n,
                            int channels, int64_t hw, float eps, cudaStream_t stream);  // batchnorm_train.cu

// Batch norm with batch statistics of a contiguous float32 CUDA tensor (N, C, ...).
torch::Tensor batchnorm_train_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(weight.is_cuda() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(bias.is_cuda() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 2 && weight.numel() == x.size(1) && bias.numel() == x.size(1),
              "x (N, C, ...), weight/bias (C)");
  const int64_t n = x.size(0), c = x.size(1);
  auto y = torch::empty_like(x);
  if (x.numel() > 0) {
    TORCH_CHECK(n * c < (1LL << 31), "too many planes");
    const int64_t hw = x.numel() / (n * c);
    auto part = torch::empty({2 * c * 32}, x.options());
    launch_batchnorm_train(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                           part.data_ptr<float>(), n, static_cast<int>(c), hw, static_cast<float>(eps),
                           current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "batchnorm_train kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("batchnorm_train_forward", &batchnorm_train_forward, "BatchNorm with batch statistics (CUDA)");
}
REGISTER_BINDING(batchnorm_train, bind);
