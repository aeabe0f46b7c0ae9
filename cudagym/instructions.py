"""The task instructions (``INSTRUCTIONS.md`` and the first observation), generated from the tool models
so that the text never drifts from what the parser accepts."""

from __future__ import annotations

from collections.abc import Sequence

from cudagym.backends import Backend
from cudagym.tasks.task import Task
from cudagym.tools import describe_tools

_BACKEND_NOTES = {
    "cuda": (
        "Kernels run on the GPU ({device}, {arch}). Write CUDA in kernels/*.cu (plain CUDA, no torch headers),\n"
        "compiled by nvcc -O3 --use_fast_math for {arch}; expose them through kernels/*_binding.cpp."
    ),
    "cpu": (
        "This is the CPU backend ({device}): kernels are C++ in kernels/*.cpp (g++ -O3 -march=native,\n"
        "OpenMP allowed; no torch headers in kernel files), exposed through kernels/*_binding.cpp.\n"
        ".cu files are refused on this backend."
    ),
}

_BINDING_EXAMPLE = """\
// kernels/my_op_binding.cpp
#include "binding_registry.h"
void my_op_launch(const float* x, float* y, int64_t n);  // defined in your kernel file
torch::Tensor my_op(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  auto y = torch::empty_like(x);  // allocation is allowed; torch compute ops are not
  my_op_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
static void bind(pybind11::module_& m) { m.def("my_op", &my_op, "my op"); }
REGISTER_BINDING(my_op, bind);"""

_MODEL_NEW_EXAMPLE = """\
# model_new.py
import torch
import torch.nn as nn
import cuda_extension

class ModelNew(nn.Module):
    def __init__(self, *args):            # same signature as Model; same parameter names and shapes
        super().__init__()
    def forward(self, x):
        return cuda_extension.my_op(x)    # only your ops and tensor creation"""


def render_instructions(task: Task, backend: Backend, *, max_turns: int) -> str:
    """The instructions for one task on one backend (without the reference source)."""
    note = _BACKEND_NOTES[backend.name].format(device=backend.device_name, arch=backend.arch or "native")
    return f"""# Task: {task.name} ({task.id})

Make the PyTorch model in model.py faster with your own kernels. Write a ModelNew in model_new.py that
computes the same outputs as Model (atol={task.metadata.atol:g}, rtol={task.metadata.rtol:g}) using kernels you
write, then submit. {note}

## Workspace
- fixed (read-only): model.py (Model, get_inputs, get_init_inputs), binding.cpp and binding_registry.h
  (they build the Python module `cuda_extension` from every REGISTER_BINDING), INSTRUCTIONS.md.
- yours: kernels/<name>.cu|.cuh|.cpp|.h and model_new.py; each .cu/.cpp compiles on its own and may include
  your .h/.cuh files, not another .cu/.cpp.

## Workflow
1. read model.py; 2. write kernels and a binding; 3. write model_new.py; 4. compile; 5. verify
(several fresh random inputs against Model); 6. profile (your time vs eager PyTorch and torch.compile);
7. iterate; 8. submit. You have {max_turns} turns; one tool call per turn.

## Rules
- ModelNew.forward may only create tensors and call your cuda_extension functions: no torch compute ops
  (torch.*, F.*, tensor arithmetic, nn layers) and no calls to the reference Model.
- No torch compute ops in C++ either (allocation such as torch::empty is fine). Weights are copied from
  Model with load_state_dict(strict=True), so keep Model's parameter names and shapes.
- Outputs must have the reference's type, shape and dtype; inputs must not be modified.

## Reward (at submit)
-1 if it does not compile or is wrong; 1 if correct; 2 if more than 5% faster than eager PyTorch;
3 if more than 5% faster than both eager and torch.compile.

## Binding and model_new.py
{_BINDING_EXAMPLE}

{_MODEL_NEW_EXAMPLE}

## Tools (call format: {{"name": ..., "arguments": {{...}}}}, optionally inside <tool_call></tool_call>)
{describe_tools()}
"""


def first_observation(task: Task, backend: Backend, *, max_turns: int, notes: Sequence[str] = ()) -> str:
    """What the agent sees at reset: ``notes`` (one "Note: ..." line each: what is known about the task's inputs and
    memory), the instructions, then the reference model."""
    source = task.source_for(backend.name)
    head = "".join(f"Note: {note}\n" for note in notes) + ("\n" if notes else "")
    return f"{head}{render_instructions(task, backend, max_turns=max_turns)}\n## model.py\n{source}"
