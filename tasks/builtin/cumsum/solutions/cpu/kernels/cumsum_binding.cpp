#include "binding_registry.h"

void cumsum_kernel(const float* x, float* y, int64_t rows, int64_t d);  // defined in cumsum.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor cumsum_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto y = torch::empty_like(x);
  cumsum_kernel(x.data_ptr<float>(), y.data_ptr<float>(), rows, d);
  return y;
}

static void bind(pybind11::module_& m) { m.def("cumsum_forward", &cumsum_forward, "cumsum over dim -1 (CPU)"); }
REGISTER_BINDING(cumsum, bind);
