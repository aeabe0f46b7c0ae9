#include "binding_registry.h"

void max_dim1_kernel(const float* x, float* y, int64_t b, int64_t m, int64_t n);  // defined in max_dim1.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor max_dim1_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() == 3 && x.size(1) > 0, "x must be (B, M, N) with M > 0");
  auto y = torch::empty({x.size(0), x.size(2)}, x.options());
  max_dim1_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1), x.size(2));
  return y;
}

static void bind(pybind11::module_& m) { m.def("max_dim1_forward", &max_dim1_forward, "max over dim 1 (CPU)"); }
REGISTER_BINDING(max_dim1, bind);
