#include "binding_registry.h"

void leaky_relu_kernel(const float* x, float* y, int64_t n);  // defined in leaky_relu.cpp

// Checks the input, allocates the output and runs the C++ kernel.
torch::Tensor leaky_relu_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  auto y = torch::empty_like(x);
  leaky_relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

static void bind(pybind11::module_& m) { m.def("leaky_relu_forward", &leaky_relu_forward, "LeakyReLU (CPU)"); }
REGISTER_BINDING(leaky_relu, bind);
