#include "binding_registry.h"

void causal_attention_kernel(const float* q, const float* k, const float* v, float* out, int64_t bh, int64_t s,
                             int64_t d);  // defined in causal_attention.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor causal_attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
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
    causal_attention_kernel(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), y.data_ptr<float>(), bh, s,
                            d);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("causal_attention_forward", &causal_attention_forward, "Causal attention (CPU)");
}
REGISTER_BINDING(causal_attention, bind);
