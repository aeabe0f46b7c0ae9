#include "binding_registry.h"

void silu_clamp_kernel(const float* x, float* y, int64_t n, float lo, float hi);  // silu_clamp.cpp

// clamp(sigmoid(x) * x, lo, hi) elementwise.
torch::Tensor silu_clamp_forward(torch::Tensor x, double lo, double hi) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  auto y = torch::empty_like(x);
  silu_clamp_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), static_cast<float>(lo),
                    static_cast<float>(hi));
  return y;
}

static void bind(pybind11::module_& m) { m.def("silu_clamp_forward", &silu_clamp_forward, "clamp(silu(x)) (CPU)"); }
REGISTER_BINDING(silu_clamp, bind);
