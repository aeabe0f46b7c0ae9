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

void launch_gemm_bias_gelu(const float* x, const float* w, const float* b, float* y, int m, int n, int k,
                           cudaStream_t stream);  // gemm_bias_gelu.cu

// gelu(x @ weight^T + bias) for x (M, K), weight (N, K), bias (N).
torch::Tensor gemm_bias_gelu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && bias.dim() == 1, "x (M, K), weight (N, K), bias (N)");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                  bias.scalar_type() == torch::kFloat32,
              "float32 expected");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(), "contiguous tensors expected");
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  TORCH_CHECK(weight.size(1) == k && bias.size(0) == n, "shape mismatch");
  TORCH_CHECK(m < (1LL << 31) && n < (1LL << 31) && k < (1LL << 31), "dimensions must fit in int32");
  auto y = torch::empty({m, n}, x.options());
  if (m > 0 && n > 0) {
    launch_gemm_bias_gelu(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                          static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), current_stream());
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "gemm_bias_gelu kernel failed: ", cudaGetErrorString(err));
  }
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("gemm_bias_gelu_forward", &gemm_bias_gelu_forward, "gelu(x @ W^T + b), TF32 tensor cores (CUDA)");
}
REGISTER_BINDING(gemm_bias_gelu, bind);
