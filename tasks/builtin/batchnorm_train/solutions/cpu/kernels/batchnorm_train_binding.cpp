#include "binding_registry.h"

void batchnorm_train_kernel(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t c, int64_t hw,
                            float eps);  // defined in batchnorm_train.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor batchnorm_train_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 2 && weight.numel() == x.size(1) && bias.numel() == x.size(1),
              "x (N, C, ...), weight/bias (C)");
  const int64_t n = x.size(0), c = x.size(1), hw = n * c == 0 ? 0 : x.numel() / (n * c);
  auto y = torch::empty_like(x);
  if (x.numel() > 0)
    batchnorm_train_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                           n, c, hw, static_cast<float>(eps));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("batchnorm_train_forward", &batchnorm_train_forward, "BatchNorm with batch statistics (CPU)");
}
REGISTER_BINDING(batchnorm_train, bind);
