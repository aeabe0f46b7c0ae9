#include "binding_registry.h"

void softmax_scale_bias_kernel(const float* x, const float* bias, float* y, int64_t rows, int64_t d,
                               float scale);  // defined in softmax_scale_bias.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor softmax_scale_bias_forward(torch::Tensor x, torch::Tensor bias, double scale) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "x needs a non-empty last dimension");
  const int64_t d = x.size(-1), rows = x.numel() / d;
  TORCH_CHECK(bias.numel() == d, "bias must have d elements");
  auto y = torch::empty_like(x);
  softmax_scale_bias_kernel(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, d,
                            static_cast<float>(scale));
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("softmax_scale_bias_forward", &softmax_scale_bias_forward, "softmax(x * scale + bias) (CPU)");
}
REGISTER_BINDING(softmax_scale_bias, bind);
