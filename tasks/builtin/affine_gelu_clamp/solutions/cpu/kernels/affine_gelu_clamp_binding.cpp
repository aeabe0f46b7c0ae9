#include "binding_registry.h"

void affine_gelu_clamp_kernel(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t d,
                              float hi);  // defined in affine_gelu_clamp.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor affine_gelu_clamp_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, double hi) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(w.device().is_cpu() && w.is_contiguous() && w.scalar_type() == torch::kFloat32,
              "w must be a contiguous float32 CPU tensor");
  TORCH_CHECK(b.device().is_cpu() && b.is_contiguous() && b.scalar_type() == torch::kFloat32,
              "b must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(w.numel() == d && b.numel() == d, "w and b must have d elements");
  auto y = torch::empty_like(x);
  affine_gelu_clamp_kernel(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), rows, d,
                           static_cast<float>(hi));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("affine_gelu_clamp_forward", &affine_gelu_clamp_forward, "clamp(gelu(x * w + b), max=1.5) (CPU)");
}
REGISTER_BINDING(affine_gelu_clamp, bind);
