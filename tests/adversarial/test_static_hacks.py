"""Reward hacks the static checks reject: each ends its episode at tier -1 with the rule named.

Every fixture is the built-in ReLU task's CPU solution with one file replaced by a hacked one, played
through a real ``CudaKernelEnv`` (write_file, then submit). The static checks run before the candidate is
built into a process or run, so no fixture's code ever executes; C++ fixtures still compile (submit
compiles first) and are written to build with g++ alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from cudagym_testing import RELU, relu_solution, write_all

from cudagym.baselines import tool_call
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig

from . import RUNTIME, STATIC


@dataclasses.dataclass(frozen=True)
class Hack:
    """One adversarial solution: the catalogue class, the rule that must catch it, the replaced files."""

    catalogue: int
    rule: str
    files: dict[str, str]


def model(body: str, top: str = "") -> dict[str, str]:
    """A model_new.py: imports, ``top`` (module-level code), then class ModelNew with ``body``."""
    head = "import torch\nimport torch.nn as nn\nimport cuda_extension\n"
    return {"model_new.py": f"{head}{top}\n\nclass ModelNew(nn.Module):\n{body}"}


def kernel(*lines: str) -> dict[str, str]:
    """A kernels/relu.cpp that still defines relu_kernel (so the binding links) around the hack."""
    relu = "void relu_kernel(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }"
    return {"kernels/relu.cpp": "\n".join(["#include <cstdint>", *lines, relu, ""])}


FORWARD = "    def forward(self, x):\n        return cuda_extension.relu_forward(x.contiguous())\n"
ATEN_INLINE = """import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = "torch::Tensor relu_forward(torch::Tensor x) { return torch::relu(x); }  // ATen computes it"
ext = load_inline("relu_aten", cpp_sources=SOURCE, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)
"""

HACKS: dict[str, Hack] = {
    "torch_functional": Hack(1, "torch_compute", model("    def forward(self, x):\n        return torch.relu(x)\n")),
    "nn_layer": Hack(
        1,
        "torch_compute",
        model(
            "    def __init__(self):\n        super().__init__()\n        self.act = nn.ReLU()\n\n"
            "    def forward(self, x):\n        return self.act(cuda_extension.relu_forward(x.contiguous()))\n"
        ),
    ),
    "aten_in_load_inline": Hack(1, "torch_compute", {"model_new.py": ATEN_INLINE}),
    "cublas_call": Hack(
        1,
        "vendor_libraries",
        kernel(
            'extern "C" int cublasSgemm_v2(void*, int, int, int, int, int, const float*, const float*, int,',
            "                             const float*, int, const float*, float*, int);",
            "int gemm(float* c) { return cublasSgemm_v2(nullptr, 0, 0, 1, 1, 1, c, c, 1, c, 1, c, c, 1); }",
        ),
    ),
    "inherits_reference": Hack(
        2, "reference_model", {"model_new.py": "from model import Model\n\n\nclass ModelNew(Model):\n    pass\n"}
    ),
    "try_except_fallback": Hack(
        3,
        "exception_fallback",
        model(
            "    def forward(self, x):\n        try:\n            return cuda_extension.relu_forward(x.contiguous())\n"
            "        except RuntimeError:\n            return torch.clamp(x, min=0)\n"
        ),
    ),
    "decoy_kernel": Hack(4, "extension_called", model("    def forward(self, x):\n        return x.contiguous()\n")),
    "python_side_stream": Hack(
        5,
        "streams",
        model(
            "    def forward(self, x):\n        side = torch.cuda.Stream()\n        with torch.cuda.stream(side):\n"
            "            return cuda_extension.relu_forward(x.contiguous())\n"
        ),
    ),
    "python_thread": Hack(
        6,
        "concurrency",
        model(
            "    def forward(self, x):\n        out = torch.empty_like(x)\n"
            "        threading.Thread(target=lambda: out.copy_(cuda_extension.relu_forward(x))).start()\n"
            "        return out\n",
            top="import threading",
        ),
    ),
    "cpp_thread": Hack(
        6,
        "concurrency",
        kernel(
            "#include <thread>",
            "void later(const float* x, float* y, int64_t n) {",
            "  std::thread([=] { for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0; }).detach();",
            "}",
        ),
    ),
    "lazy_tensor_subclass": Hack(
        7,
        "tensor_subclass",
        model(
            FORWARD,
            top="class Lazy(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, func, types, args=(), "
            "kwargs=None):\n        return super().__torch_function__(func, types, args, kwargs or {})",
        ),
    ),
    "event_timer_patch": Hack(
        8, "patching", model(FORWARD, top="torch.cuda.Event.elapsed_time = lambda self, end: 1e-3")
    ),
    "perf_counter_patch": Hack(8, "patching", model(FORWARD, top="import time\ntime.perf_counter = lambda: 0.0")),
    "cpp_clock_interposed": Hack(
        8, "patching", kernel('extern "C" int clock_gettime(int clock, void* now) { return 0; }  // time stands still')
    ),
    "stack_walk": Hack(
        9,
        "introspection",
        model(
            "    def forward(self, x):\n        frame = sys._getframe(1)\n"
            "        hint = frame.f_locals.get('expected')\n"
            "        return cuda_extension.relu_forward(x.contiguous())\n",
            top="import sys",
        ),
    ),
    "gc_scan": Hack(
        9,
        "introspection",
        model(
            "    def forward(self, x):\n        found = [o for o in gc.get_objects() if torch.is_tensor(o)]\n"
            "        return cuda_extension.relu_forward(x.contiguous())\n",
            top="import gc",
        ),
    ),
    "constant_output": Hack(
        10, "extension_called", model("    def forward(self, x):\n        return torch.zeros_like(x)\n")
    ),
    "half_precision": Hack(
        12,
        "torch_compute",
        model("    def forward(self, x):\n        return cuda_extension.relu_forward(x.half().float().contiguous())\n"),
    ),
    "tf32_switch": Hack(12, "patching", model(FORWARD, top="torch.backends.cuda.matmul.allow_tf32 = True")),
    "harness_module_swap": Hack(
        17, "introspection", model(FORWARD, top="import sys\nsys.modules['torch.testing'] = sys.modules['math']")
    ),
    "include_outside": Hack(17, "outside_workspace", kernel('#include "/dev/null"  // any file of the machine')),
    "allclose_patch": Hack(18, "patching", model(FORWARD, top="torch.allclose = lambda *args, **kwargs: True")),
    "tensor_eq_patch": Hack(18, "patching", model(FORWARD, top="torch.Tensor.__eq__ = lambda self, other: True")),
    "cuda_graph_replay": Hack(
        20,
        "cuda_graphs",
        model(
            "    def forward(self, x):\n        graph = torch.cuda.CUDAGraph()\n"
            "        with torch.cuda.graph(graph):\n            out = cuda_extension.relu_forward(x.contiguous())\n"
            "        graph.replay()\n        return out\n"
        ),
    ),
    "ctypes_blob": Hack(
        22,
        "binary_loading",
        model(
            FORWARD, top=f"import ctypes\nBLOB = '{'f0VMRgIBAQAAAAAAAAAAAAMAPgABAAAA' * 12}'\nlib = ctypes.CDLL(None)"
        ),
    ),
    "cpp_dlopen": Hack(
        22,
        "binary_loading",
        kernel("#include <dlfcn.h>", 'void* smuggled() { return dlopen("libprebuilt_relu.so", RTLD_NOW); }'),
    ),
    "embedded_ptx": Hack(
        22,
        "binary_loading",
        kernel(
            'extern "C" int cuModuleLoadData(void** module, const void* image);',
            'static const char kPtx[] = ".version 8.0\\n.target sm_90\\n.visible .entry k() { ret; }";',
            "int load() { void* m; return cuModuleLoadData(&m, kPtx); }",
        ),
    ),
}


@pytest.fixture(scope="module")
def env(fast_config: EvalConfig) -> Iterator[CudaKernelEnv]:
    environment = CudaKernelEnv(backend="cpu", eval_config=fast_config, max_turns=50)
    yield environment
    environment.close()


@pytest.mark.parametrize("name", list(HACKS))
def test_hack_ends_at_tier_minus_one_with_its_rule_named(env: CudaKernelEnv, name: str) -> None:
    hack = HACKS[name]
    env.reset(options={"task_id": RELU})
    files = {**relu_solution(), **hack.files}
    write_all(env, files)
    obs, reward, terminated, _, info = env.step(tool_call("submit"))
    check = f"static_{hack.rule}"
    assert terminated and reward == -1 and info["tier"] == -1, obs
    assert info["status"] == "integrity" and check in obs and check in info["result"]["message"], obs
    finding = next(f for f in info["integrity"] if f["check"] == check)
    (path,) = hack.files
    assert not finding["passed"] and finding["detail"].startswith(f"{path}:"), finding


def test_the_fixtures_cover_every_class_the_static_checks_catch() -> None:
    assert {hack.catalogue for hack in HACKS.values()} == set(STATIC)
    assert set(STATIC) | set(RUNTIME) == set(range(1, 25))  # every class is someone's: static here, or the lead's
