#include "binding_registry.h"

void log_softmax_kernel(const float* x, float* y, int64_t rows, int64_t d);  // defined in log_softmax.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor log_softmax_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto y = torch::empty_like(x);
  log_softmax_kernel(x.data_ptr<float>(), y.data_ptr<float>(), rows, d);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("log_softmax_forward", &log_softmax_forward, "log-softmax over dim -1 (CPU)");
}
REGISTER_BINDING(log_softmax, bind);
