// binding_registry.h -- fixed file of the cudagym workspace (do not edit).
//
// Every kernels/*_binding.cpp includes this header, defines a function that adds its Python
// functions to the module, and registers it:
//
//     #include "binding_registry.h"
//     torch::Tensor my_op(torch::Tensor x) { ... }
//     static void bind_my_op(pybind11::module_& m) { m.def("my_op", &my_op, "what it does"); }
//     REGISTER_BINDING(my_op, bind_my_op);
//
// binding.cpp (also fixed) creates the Python module `cuda_extension` and calls every registered
// function. The header brings in ATen tensors and pybind11's tensor casters only (not all of
// <torch/extension.h>), which keeps a binding file's compile time to seconds.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <utility>
#include <vector>

// torch::Tensor, torch::empty, torch::kFloat32, ... as in <torch/extension.h>.
#include <torch/types.h>

namespace cudagym {

using BindingFn = void (*)(pybind11::module_&);

// One list per extension: an inline function's static is shared by every translation unit.
inline std::vector<std::pair<const char*, BindingFn>>& binding_registry() {
  static std::vector<std::pair<const char*, BindingFn>> entries;
  return entries;
}

struct BindingRegistrar {
  BindingRegistrar(const char* name, BindingFn fn) { binding_registry().emplace_back(name, fn); }
};

}  // namespace cudagym

#define REGISTER_BINDING(name, fn) \
  static ::cudagym::BindingRegistrar cudagym_binding_registrar_##name(#name, fn)
