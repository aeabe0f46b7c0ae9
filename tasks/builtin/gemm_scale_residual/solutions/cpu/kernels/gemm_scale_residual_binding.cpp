#include "binding_registry.h"

void gemm_scale_residual_kernel(const float* x, const float* w, const float* b, float* y, int64_t m, int64_t d,
                                float scale);  // defined in gemm_scale_residual.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor gemm_scale_residual_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double scale) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2 && weight.size(0) == x.size(1) && weight.size(1) == x.size(1) &&
                  bias.numel() == x.size(1),
              "x (M, D), weight (D, D), bias (D)");
  const int64_t m = x.size(0), d = x.size(1);
  auto y = torch::empty({m, d}, x.options());
  gemm_scale_residual_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                             m, d, static_cast<float>(scale));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("gemm_scale_residual_forward", &gemm_scale_residual_forward, "(x @ W^T + b) * scale + x (CPU)");
}
REGISTER_BINDING(gemm_scale_residual, bind);
