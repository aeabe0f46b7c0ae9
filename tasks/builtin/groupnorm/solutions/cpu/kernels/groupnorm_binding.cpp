#include "binding_registry.h"

void groupnorm_kernel(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t c, int64_t hw,
                      int64_t groups, float eps);  // defined in groupnorm.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor groupnorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t groups, double eps) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 2 && groups > 0 && x.size(1) % groups == 0, "x (N, C, ...) with C divisible by groups");
  TORCH_CHECK(weight.numel() == x.size(1) && bias.numel() == x.size(1), "weight/bias must have C elements");
  const int64_t n = x.size(0), c = x.size(1), hw = n * c == 0 ? 0 : x.numel() / (n * c);
  auto y = torch::empty_like(x);
  if (x.numel() > 0)
    groupnorm_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), n, c,
                     hw, groups, static_cast<float>(eps));
  return y;
}

static void bind(pybind11::module_& m) { m.def("groupnorm_forward", &groupnorm_forward, "GroupNorm (CPU)"); }
REGISTER_BINDING(groupnorm, bind);
