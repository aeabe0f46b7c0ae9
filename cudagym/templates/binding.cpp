// binding.cpp -- fixed file of the cudagym workspace (do not edit).
// Creates the Python module `cuda_extension` from every REGISTER_BINDING in kernels/*_binding.cpp.
#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) {
  m.doc() = "kernels written for this cudagym task";
  for (const auto& entry : cudagym::binding_registry()) {
    entry.second(m);
  }
}
