#include "binding_registry.h"

void relu_kernel(const float* x, float* y, int64_t n);  // defined in relu.cpp

// Checks the input, allocates the output and runs the C++ kernel.
torch::Tensor relu_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  auto y = torch::empty_like(x);
  relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

static void bind(pybind11::module_& m) { m.def("relu_forward", &relu_forward, "ReLU (CPU)"); }
REGISTER_BINDING(relu, bind);
