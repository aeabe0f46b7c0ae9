#include "binding_registry.h"

void gelu_tanh_kernel(const float* x, float* y, int64_t n);  // defined in gelu_tanh.cpp

// Checks the input, allocates the output and runs the C++ kernel.
torch::Tensor gelu_tanh_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  auto y = torch::empty_like(x);
  gelu_tanh_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

static void bind(pybind11::module_& m) { m.def("gelu_tanh_forward", &gelu_tanh_forward, "GELU, tanh form (CPU)"); }
REGISTER_BINDING(gelu_tanh, bind);
