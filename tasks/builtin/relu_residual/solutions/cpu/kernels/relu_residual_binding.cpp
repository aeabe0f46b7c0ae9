#include "binding_registry.h"

void relu_residual_kernel(const float* x, const float* res, float* y, int64_t n);  // relu_residual.cpp

// relu(x) + residual for two contiguous float32 tensors of the same shape.
torch::Tensor relu_residual_forward(torch::Tensor x, torch::Tensor residual) {
  TORCH_CHECK(x.device().is_cpu() && residual.device().is_cpu(), "CPU tensors expected");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(residual.is_contiguous() && residual.scalar_type() == torch::kFloat32, "residual: contiguous float32");
  TORCH_CHECK(x.sizes() == residual.sizes(), "x and residual must have the same shape");
  auto y = torch::empty_like(x);
  relu_residual_kernel(x.data_ptr<float>(), residual.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("relu_residual_forward", &relu_residual_forward, "relu(x) + residual (CPU)");
}
REGISTER_BINDING(relu_residual, bind);
