#include "binding_registry.h"

void bmm_kernel(const float* a, const float* b, float* y, int64_t batch, int64_t m, int64_t k,
                int64_t n);  // defined in bmm.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor bmm_forward(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.device().is_cpu() && a.is_contiguous() && a.scalar_type() == torch::kFloat32,
              "a must be a contiguous float32 CPU tensor");
  TORCH_CHECK(b.device().is_cpu() && b.is_contiguous() && b.scalar_type() == torch::kFloat32,
              "b must be a contiguous float32 CPU tensor");
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1),
              "a (B, M, K), b (B, K, N)");
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  auto y = torch::empty({batch, m, n}, a.options());
  bmm_kernel(a.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), batch, m, k, n);
  return y;
}

static void bind(pybind11::module_& m) { m.def("bmm_forward", &bmm_forward, "bmm(a, b) (CPU)"); }
REGISTER_BINDING(bmm, bind);
