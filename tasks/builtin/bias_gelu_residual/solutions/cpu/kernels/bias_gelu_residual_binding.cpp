#include "binding_registry.h"

void bias_gelu_residual_kernel(const float* x, const float* bias, const float* res, float* y, int64_t rows,
                               int64_t d);  // bias_gelu_residual.cpp

// gelu(x + bias) + residual, bias broadcast over the last dimension.
torch::Tensor bias_gelu_residual_forward(torch::Tensor x, torch::Tensor bias, torch::Tensor residual) {
  TORCH_CHECK(x.device().is_cpu() && bias.device().is_cpu() && residual.device().is_cpu(), "CPU tensors expected");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(residual.is_contiguous() && residual.scalar_type() == torch::kFloat32 && residual.sizes() == x.sizes(),
              "residual must be contiguous float32 shaped like x");
  const int64_t d = x.size(-1);
  TORCH_CHECK(bias.is_contiguous() && bias.numel() == d && bias.scalar_type() == torch::kFloat32, "bad bias");
  auto y = torch::empty_like(x);
  bias_gelu_residual_kernel(x.data_ptr<float>(), bias.data_ptr<float>(), residual.data_ptr<float>(),
                            y.data_ptr<float>(), x.numel() / d, d);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("bias_gelu_residual_forward", &bias_gelu_residual_forward, "gelu(x + bias) + residual (CPU)");
}
REGISTER_BINDING(bias_gelu_residual, bind);
