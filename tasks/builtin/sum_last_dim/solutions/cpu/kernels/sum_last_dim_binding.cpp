#include "binding_registry.h"

void sum_last_dim_kernel(const float* x, float* y, int64_t rows, int64_t d);  // sum_last_dim.cpp

// Sums over the last dimension of a contiguous float32 tensor of any rank >= 1.
torch::Tensor sum_last_dim_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  const int64_t d = x.size(-1);
  auto out_sizes = x.sizes().vec();
  out_sizes.pop_back();
  auto y = torch::empty(out_sizes, x.options());
  const int64_t rows = d == 0 ? y.numel() : x.numel() / d;
  sum_last_dim_kernel(x.data_ptr<float>(), y.data_ptr<float>(), rows, d);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("sum_last_dim_forward", &sum_last_dim_forward, "sum over dim -1 (CPU)");
}
REGISTER_BINDING(sum_last_dim, bind);
