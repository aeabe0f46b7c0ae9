#include "binding_registry.h"

void logsumexp_kernel(const float* x, float* y, int64_t rows, int64_t d);  // defined in logsumexp.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor logsumexp_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto sizes = x.sizes().vec();
  sizes.pop_back();
  auto y = torch::empty(sizes, x.options());
  logsumexp_kernel(x.data_ptr<float>(), y.data_ptr<float>(), rows, d);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("logsumexp_forward", &logsumexp_forward, "logsumexp over dim -1 (CPU)");
}
REGISTER_BINDING(logsumexp, bind);
