#include "binding_registry.h"

void rmsnorm_swiglu_kernel(const float* x, const float* gate, const float* w, float* y, int64_t rows, int64_t d,
                           float eps);  // defined in rmsnorm_swiglu.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor rmsnorm_swiglu_forward(torch::Tensor x, torch::Tensor gate, torch::Tensor weight, double eps) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(gate.device().is_cpu() && gate.is_contiguous() && gate.scalar_type() == torch::kFloat32,
              "gate must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(gate.sizes() == x.sizes() && weight.numel() == d, "shape mismatch");
  auto y = torch::empty_like(x);
  rmsnorm_swiglu_kernel(x.data_ptr<float>(), gate.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(),
                        rows, d, static_cast<float>(eps));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("rmsnorm_swiglu_forward", &rmsnorm_swiglu_forward, "rmsnorm(x) * weight * silu(gate) (CPU)");
}
REGISTER_BINDING(rmsnorm_swiglu, bind);
