#include "binding_registry.h"

void row_standardize_relu_kernel(const float* x, float* y, int64_t rows, int64_t d, float eps);

// relu((x - mean) / (std + eps)) over the last dimension.
torch::Tensor row_standardize_relu_forward(torch::Tensor x, double eps) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  auto y = torch::empty_like(x);
  const int64_t d = x.size(-1);
  row_standardize_relu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel() / d, d, static_cast<float>(eps));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("row_standardize_relu_forward", &row_standardize_relu_forward, "relu(row standardise) (CPU)");
}
REGISTER_BINDING(row_standardize_relu, bind);
