#include "binding_registry.h"

void softmax_kernel(const float* x, float* y, int64_t rows, int64_t d);  // softmax.cpp

// Softmax over the last dimension of a contiguous float32 tensor.
torch::Tensor softmax_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  auto y = torch::empty_like(x);
  const int64_t d = x.size(-1);
  softmax_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel() / d, d);
  return y;
}

static void bind(pybind11::module_& m) { m.def("softmax_forward", &softmax_forward, "softmax over dim -1 (CPU)"); }
REGISTER_BINDING(softmax, bind);
