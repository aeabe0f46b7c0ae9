#include "binding_registry.h"

void l2_normalize_kernel(const float* x, float* y, int64_t rows, int64_t d, float eps);  // defined in l2_normalize.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor l2_normalize_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto y = torch::empty_like(x);
  l2_normalize_kernel(x.data_ptr<float>(), y.data_ptr<float>(), rows, d, 1e-12f);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("l2_normalize_forward", &l2_normalize_forward, "L2-normalise rows (CPU)");
}
REGISTER_BINDING(l2_normalize, bind);
