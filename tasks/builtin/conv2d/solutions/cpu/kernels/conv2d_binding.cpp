#include "binding_registry.h"

void conv2d_kernel(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t cin, int64_t h,
                   int64_t wd, int64_t cout, int64_t kh, int64_t kw, int64_t ph, int64_t pw, int64_t oh,
                   int64_t ow);  // defined in conv2d.cpp

// Checks the inputs, allocates the output and runs the C++ kernel.
torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t pad_h, int64_t pad_w) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(weight.device().is_cpu() && weight.is_contiguous() && weight.scalar_type() == torch::kFloat32,
              "weight must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32,
              "bias must be a contiguous float32 CPU tensor");
  TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && weight.size(1) == x.size(1) && bias.numel() == weight.size(0),
              "x (N, Cin, H, W), weight (Cout, Cin, kh, kw), bias (Cout)");
  const int64_t n = x.size(0), cin = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t cout = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  const int64_t oh = h + 2 * pad_h - kh + 1, ow = wd + 2 * pad_w - kw + 1;
  TORCH_CHECK(oh > 0 && ow > 0, "empty output");
  auto y = torch::empty({n, cout, oh, ow}, x.options());
  conv2d_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), n, cin, h,
                wd, cout, kh, kw, pad_h, pad_w, oh, ow);
  return y;
}

static void bind(pybind11::module_& m) { m.def("conv2d_forward", &conv2d_forward, "Conv2d (stride 1) (CPU)"); }
REGISTER_BINDING(conv2d, bind);
