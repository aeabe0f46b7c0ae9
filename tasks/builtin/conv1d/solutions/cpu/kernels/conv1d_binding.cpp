#include "binding_registry.h"

void conv1d_kernel(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t cin, int64_t len,
                   int64_t cout, int64_t k, int64_t pad, int64_t olen);  // defined in conv1d.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor conv1d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() == 3 && weight.dim() == 3 && weight.size(1) == x.size(1) && bias.numel() == weight.size(0),
              "x (N, Cin, L), weight (Cout, Cin, K), bias (Cout)");
  const int64_t n = x.size(0), cin = x.size(1), len = x.size(2), cout = weight.size(0), k = weight.size(2);
  const int64_t olen = len + 2 * pad - k + 1;
  TORCH_CHECK(olen > 0, "empty output");
  auto y = torch::empty({n, cout, olen}, x.options());
  conv1d_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), n, cin, len,
                cout, k, pad, olen);
  return y;
}

static void bind(pybind11::module_& m) { m.def("conv1d_forward", &conv1d_forward, "Conv1d (stride 1) (CPU)"); }
REGISTER_BINDING(conv1d, bind);
