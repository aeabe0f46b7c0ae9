#include "binding_registry.h"

void add_layernorm_kernel(const float* x, const float* res, const float* w, const float* b, float* y, int64_t rows,
                          int64_t d, float eps);  // defined in add_layernorm.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, torch::Tensor bias,
                                    double eps) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(residual.device().is_cpu() && residual.is_contiguous() && residual.scalar_type() == torch::kFloat32,
              "residual must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(residual.sizes() == x.sizes() && weight.numel() == d && bias.numel() == d, "shape mismatch");
  auto y = torch::empty_like(x);
  add_layernorm_kernel(x.data_ptr<float>(), residual.data_ptr<float>(), weight.data_ptr<float>(),
                       bias.data_ptr<float>(), y.data_ptr<float>(), rows, d, static_cast<float>(eps));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("add_layernorm_forward", &add_layernorm_forward, "LayerNorm(x + residual) (CPU)");
}
REGISTER_BINDING(add_layernorm, bind);
