#include "binding_registry.h"

void scale_bias_tanh_kernel(const float* x, const float* scale, const float* bias, float* y, int64_t rows,
                            int64_t d);  // scale_bias_tanh.cpp

// tanh(x * scale + bias) with scale and bias broadcast over the last dimension.
torch::Tensor scale_bias_tanh_forward(torch::Tensor x, torch::Tensor scale, torch::Tensor bias) {
  TORCH_CHECK(x.device().is_cpu() && scale.device().is_cpu() && bias.device().is_cpu(), "CPU tensors expected");
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
  const int64_t d = x.size(-1);
  TORCH_CHECK(scale.is_contiguous() && scale.numel() == d && scale.scalar_type() == torch::kFloat32, "bad scale");
  TORCH_CHECK(bias.is_contiguous() && bias.numel() == d && bias.scalar_type() == torch::kFloat32, "bad bias");
  auto y = torch::empty_like(x);
  scale_bias_tanh_kernel(x.data_ptr<float>(), scale.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                         x.numel() / d, d);
  return y;
}

static void bind(pybind11::module_& m) {
  m.def("scale_bias_tanh_forward", &scale_bias_tanh_forward, "tanh(x * scale + bias) (CPU)");
}
REGISTER_BINDING(scale_bias_tanh, bind);
