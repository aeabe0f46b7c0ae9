#include "binding_registry.h"

void gemm_bias_gelu_kernel(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t k,
                           int64_t n);  // defined in gemm_bias_gelu.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor gemm_bias_gelu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && bias.dim() == 1 && weight.size(1) == x.size(1) &&
                  bias.size(0) == weight.size(0),
              "x (M, K), weight (N, K), bias (N)");
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  auto y = torch::empty({m, n}, x.options());
  gemm_bias_gelu_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), m,
                        k, n);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("gemm_bias_gelu_forward", &gemm_bias_gelu_forward, "gelu(x @ W^T + b) (CPU)");
}
REGISTER_BINDING(gemm_bias_gelu, bind);
