#include "binding_registry.h"

void glu_kernel(const float* x, float* y, int64_t rows, int64_t h);  // glu.cpp

// a * sigmoid(b) with (a, b) = x.chunk(2, dim=-1).
torch::Tensor glu_forward(torch::Tensor x) {
  TORCH_CHECK(x.device().is_cpu(), "x must be a CPU tensor");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "last dimension must be even");
  const int64_t d = x.size(-1);
  auto sizes = x.sizes().vec();
  sizes.back() = d / 2;
  auto y = torch::empty(sizes, x.options());
  if (y.numel() > 0) glu_kernel(x.data_ptr<float>(), y.data_ptr<float>(), x.numel() / d, d / 2);
  return y;
}

static void bind(pybind11::module_& m) { m.def("glu_forward", &glu_forward, "a * sigmoid(b) (CPU)"); }
REGISTER_BINDING(glu, bind);
