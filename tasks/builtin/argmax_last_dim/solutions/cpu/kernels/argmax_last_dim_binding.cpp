#include "binding_registry.h"

void argmax_last_dim_kernel(const float* x, int64_t* y, int64_t rows, int64_t d);  // defined in argmax_last_dim.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor argmax_last_dim_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  auto sizes = x.sizes().vec();
  sizes.pop_back();
  auto y = torch::empty(sizes, x.options().dtype(torch::kInt64));
  argmax_last_dim_kernel(x.data_ptr<float>(), y.data_ptr<int64_t>(), rows, d);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("argmax_last_dim_forward", &argmax_last_dim_forward, "argmax over dim -1 (CPU)");
}
REGISTER_BINDING(argmax_last_dim, bind);
