#include "binding_registry.h"

void sdpa_kernel(const float* q, const float* k, const float* v, float* out, int64_t bh, int64_t s,
                 int64_t d);  // defined in sdpa.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor sdpa_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  TORCH_CHECK(q.device().is_cpu() && q.is_contiguous() && q.scalar_type() == torch::kFloat32,
              "q must be a contiguous float32 CPU tensor");
  TORCH_CHECK(k.device().is_cpu() && k.is_contiguous() && k.scalar_type() == torch::kFloat32,
              "k must be a contiguous float32 CPU tensor");
  TORCH_CHECK(v.device().is_cpu() && v.is_contiguous() && v.scalar_type() == torch::kFloat32,
              "v must be a contiguous float32 CPU tensor");
  TORCH_CHECK(q.dim() >= 2 && q.sizes() == k.sizes() && q.sizes() == v.sizes(),
              "q, k, v must have the same shape (..., S, D)");
  const int64_t s = q.size(-2), d = q.size(-1), bh = s * d == 0 ? 0 : q.numel() / (s * d);
  auto y = torch::empty_like(q);
  if (y.numel() > 0)
    sdpa_kernel(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), y.data_ptr<float>(), bh, s, d);
  return y;
}

static void bind(pybind11::module_& m) { m.def("sdpa_forward", &sdpa_forward, "Scaled dot-product attention (CPU)"); }
REGISTER_BINDING(sdpa, bind);
