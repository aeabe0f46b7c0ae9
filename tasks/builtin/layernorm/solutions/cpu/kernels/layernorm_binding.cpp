#include "binding_registry.h"

void layernorm_kernel(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t d,
                      float eps);  // layernorm.cpp

// LayerNorm over the last dimension with weight and bias of shape (d,).
torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() && bias.device().is_cpu(), "CPU tensors expected");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  const int64_t d = x.size(-1);
  TORCH_CHECK(weight.is_contiguous() && weight.numel() == d && weight.scalar_type() == torch::kFloat32, "bad weight");
  TORCH_CHECK(bias.is_contiguous() && bias.numel() == d && bias.scalar_type() == torch::kFloat32, "bad bias");
  auto y = torch::empty_like(x);
  layernorm_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                   x.numel() / d, d, static_cast<float>(eps));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("layernorm_forward", &layernorm_forward, "LayerNorm over dim -1 (CPU)");
}
REGISTER_BINDING(layernorm, bind);
