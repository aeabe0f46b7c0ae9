#include "binding_registry.h"

void gemm_bias_relu_kernel(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t k,
                           int64_t n);  // gemm_bias_relu.cpp

// relu(x @ weight^T + bias) for x (M, K), weight (N, K), bias (N).
torch::Tensor gemm_bias_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() && bias.device().is_cpu(), "CPU tensors expected");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && bias.dim() == 1, "x (M, K), weight (N, K), bias (N)");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                  bias.scalar_type() == torch::kFloat32,
              "float32 expected");
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous() && bias.is_contiguous(), "contiguous tensors expected");
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  TORCH_CHECK(weight.size(1) == k && bias.size(0) == n, "shape mismatch");
  auto y = torch::empty({m, n}, x.options());
  gemm_bias_relu_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), m,
                        k, n);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("gemm_bias_relu_forward", &gemm_bias_relu_forward, "relu(x @ W^T + b) (CPU)");
}
REGISTER_BINDING(gemm_bias_relu, bind);
