"""Compile time of one kernel in KernelBench's single-file format and in cudagym's workspace layout, cold and warm.

    python benchmarks/kernelbench_compile.py --backend cuda --runs 3 --json kernelbench_compile.json

Both formats hold the same kernel: a tiled fp32 matmul of two 4096x4096 matrices.

* **kernelbench**: ``model_new.py`` builds it with ``load_inline`` (a declaration in ``cpp_sources``, the kernel and its
  torch wrapper in ``cuda_sources`` with ``#include <torch/extension.h>``, ``functions=[...]``), as KernelBench's
  solutions do. It is built the way cudagym builds it: the request a candidate's ``load_inline`` sends
  (``cudagym/harness/inline_loader.py``) goes through ``cudagym.inline_build.InlineBuilder`` (``main.cpp`` against
  the binding headers and their precompiled header, ``cuda.cu`` split by ``cudagym.kernel_split`` into its kernels,
  compiled by nvcc without torch's headers, and its host code, compiled by the C++ compiler against
  ``torch/types.h`` and a precompiled header of its includes, as ``cudagym.light_headers``' guards allow; objects
  cached by content, ccache, the compiler sandbox).
* **kernelbench-template**: the same kernel as a template on its element type, launched through
  ``AT_DISPATCH_FLOATING_TYPES`` (its float and double instances), split too: the host unit is compiled first, the
  device unit instantiating the launchers its object uses.
* **kernelbench-light**: the same with ``BuildOptions(split_sources=False)``: ``cuda.cu`` whole, by nvcc against
  ``torch/types.h`` in place of ``torch/extension.h`` where the guard of ``cudagym.light_headers`` allows it, as
  before the split.
* **kernelbench-heavy**: the split with ``BuildOptions(light_headers=False)``: ``main.cpp`` and the host unit against
  ``torch/extension.h`` (and its precompiled header once built), as before they got lighter headers.
* **kernelbench-as-written**: the same with ``light_headers=False`` too: ``cuda.cu`` always compiled as written (with
  ``torch/extension.h``), as before the light header.
* **workspace**: ``kernels/matmul.cu`` (the kernel and its launcher, no torch header) and ``kernels/matmul_binding.cpp``
  (the torch wrapper, registered through ``binding_registry.h``), built by ``cudagym.build.Builder``.

Scenarios, each a compile of the build alone (no candidate process, no verify):

* **cold**: a new empty cache folder (no objects, no precompiled header, an empty ccache, the light header's guard not
  read yet): the first compile of a fresh install. It does not wait for the precompiled header, which is built in the
  background meanwhile (and waited for afterwards, unmeasured); ``--wait-for-pch`` makes it wait, as compiles did
  before. The median of ``--cold-runs`` (default ``--runs``) such compiles, each on a new folder. ``--prepared``: the
  folder holds the precompiled headers ``cudagym prepare`` makes (built before the clock starts): a prepared
  machine's first compile, objects and ccache still empty.
* **warm**: one line of the kernel edited (a constant of the CUDA kernel), the header built and everything else cached:
  the agent's inner loop. The median of ``--runs`` edits.
* **unchanged**: the same sources again (a new episode submitting them): the cache hit.
* **broken**: the kernel edited into a compile error (a call of an undeclared function), everything else cached: what
  an agent's failed edit costs. With the light header that is the lighter copy's failed compile and then the source's
  own (whose error is the one shown), the path every source the lighter copy cannot build takes; split, the device
  unit's failure first (a name it lacks may be one torch's headers declare). One run.
* **typo**: the kernel edited into a typo (a missing ``;``), everything else cached: the split's device unit says what
  the whole file would, so its errors stand at once (``kernel_split.errors_of_the_file``). One run.

The formats take turns run by run (format A's first cold run, format B's, A's second...), so that whatever else the
machine runs weighs on them alike.

Where torch has no CUDA libraries (a machine with nvcc but CPU-only torch) a CUDA extension cannot be linked; the
figures are then the compile alone, the link's failure (fractions of a second) included, and the table says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudagym import header_reads
from cudagym.backends import Backend, resolve_backend
from cudagym.build import Builder, BuildOptions, join_background_headers
from cudagym.inline_build import InlineBuilder
from cudagym.prepare import single_file_headers
from cudagym.results import CompileResult, Status
from cudagym.tasks import load
from cudagym.workspace import Workspace

logger = logging.getLogger("kernelbench_compile")
COMPILE_TIMEOUT = 1800.0  # a compile is measured, not cut at the builder's default (a loaded machine takes minutes)

KERNEL = r"""
#define TILE 32
__global__ void matmul_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int N) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  const int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;  // EDIT
  for (int t = 0; t < N; t += TILE) {
    As[threadIdx.y][threadIdx.x] = (row < N && t + threadIdx.x < N) ? A[row * N + t + threadIdx.x] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (col < N && t + threadIdx.y < N) ? B[(t + threadIdx.y) * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < N && col < N) C[row * N + col] = acc;
}
"""
STREAM = """
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)
#include <c10/cuda/CUDAStream.h>
static cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream(); }
#else  // CPU-only torch headers lack c10/cuda's generated config: the legacy stream, so that the compile still runs
static cudaStream_t current_stream() { return nullptr; }
#endif
"""
LAUNCH = "matmul_kernel<<<dim3((N + TILE - 1) / TILE, (N + TILE - 1) / TILE), dim3(TILE, TILE), 0, stream>>>"
KERNELBENCH_CUDA = (
    "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
    + STREAM
    + KERNEL
    + f"""
torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B) {{
  const int N = A.size(0);
  auto C = torch::empty({{N, N}}, A.options());
  cudaStream_t stream = current_stream();
  {LAUNCH}(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), N);
  return C;
}}
"""
)
# the same kernel as a template on the element type, launched through torch's dispatch macro (its float and double
# instances), as many single-file solutions write it
KERNELBENCH_TEMPLATE_CUDA = KERNELBENCH_CUDA.replace(
    "__global__ void matmul_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,",
    "template <typename scalar_t>\n__global__ void matmul_kernel(const scalar_t* __restrict__ A,"
    " const scalar_t* __restrict__ B, scalar_t* __restrict__ C,",
).replace(
    f"  {LAUNCH}(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), N);",
    '  AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "matmul_cuda", ([&] {\n'
    f"    {LAUNCH.replace('matmul_kernel<<<', 'matmul_kernel<scalar_t><<<')}"
    "(A.data_ptr<scalar_t>(), B.data_ptr<scalar_t>(), C.data_ptr<scalar_t>(), N);\n  }));",
)
KERNELBENCH_CPP = "torch::Tensor matmul_cuda(torch::Tensor A, torch::Tensor B);"
WORKSPACE_CU = (
    "#include <cuda_runtime.h>\n"
    + KERNEL
    + f"""
void launch_matmul(const float* A, const float* B, float* C, int N, cudaStream_t stream) {{
  {LAUNCH}(A, B, C, N);
}}
"""
)
WORKSPACE_BINDING = (
    '#include "binding_registry.h"\n#include <cuda_runtime.h>\n'
    + STREAM
    + """
void launch_matmul(const float* A, const float* B, float* C, int N, cudaStream_t stream);  // matmul.cu

torch::Tensor matmul_forward(torch::Tensor A, torch::Tensor B) {
  const int N = A.size(0);
  auto C = torch::empty({N, N}, A.options());
  launch_matmul(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), N, current_stream());
  return C;
}

static void bind(pybind11::module_& m) { m.def("matmul_forward", &matmul_forward, "C = A @ B"); }
REGISTER_BINDING(matmul, bind);
"""
)


# the compile errors an edit can make: how the edited statement ends, and the text the error's diagnostics show
ERRORS = {"broken": ("; undeclared_{token}();", "undeclared_"), "typo": ("", 'expected a ";"')}


def edited(source: str, token: str, *, error: str = "") -> str:
    """``source`` with its kernel's marked line changed (a new constant in the code, so that neither the object cache
    nor ccache has seen it), as an agent's edit changes a kernel; ``error`` (of :data:`ERRORS`): into that compile
    error as well."""
    end = ERRORS[error][0].format(token=token) if error else ";"
    return source.replace("float acc = 0.0f;  // EDIT", f"float acc = 0.0f * {int(token, 16)}ull{end}")


def kernelbench_request(cuda_source: str) -> dict[str, Any]:
    """What the candidate's ``load_inline(name="matmul_ext", cpp_sources=..., cuda_sources=..., functions=[...],
    extra_cuda_cflags=["-O3"])`` sends to the trusted builder."""
    return {
        "loader": "load_inline",
        "name": "matmul_ext",
        "cpp_sources": [KERNELBENCH_CPP],
        "cuda_sources": [cuda_source],
        "functions": [["matmul_cuda", "matmul_cuda"]],
        "with_pytorch_error_handling": True,
        "no_implicit_headers": False,
        "extra_cflags": [],
        "extra_cuda_cflags": ["-O3"],
        "extra_ldflags": [],
        "extra_include_paths": [],
        "with_cuda": True,
    }


@dataclasses.dataclass
class Format:
    """One source format: how to compile a version of its kernel with a given cache folder, and the builder's
    options that differ from the defaults."""

    name: str
    compile: Callable[[Builder, Workspace, str], CompileResult]  # (builder, workspace, kernel source)
    kernel: str
    options: dict[str, Any] = dataclasses.field(default_factory=dict)


def compile_kernelbench(builder: Builder, workspace: Workspace, cuda_source: str) -> CompileResult:
    return InlineBuilder(builder).build(kernelbench_request(cuda_source), workspace)[1]


def compile_workspace(builder: Builder, workspace: Workspace, cuda_source: str) -> CompileResult:
    workspace.write("kernels/matmul.cu", cuda_source)
    workspace.write("kernels/matmul_binding.cpp", WORKSPACE_BINDING)
    return builder.build(workspace)


FORMATS = (
    Format("kernelbench", compile_kernelbench, KERNELBENCH_CUDA),
    Format("kernelbench-light", compile_kernelbench, KERNELBENCH_CUDA, {"split_sources": False}),
    Format("kernelbench-template", compile_kernelbench, KERNELBENCH_TEMPLATE_CUDA),
    Format("kernelbench-heavy", compile_kernelbench, KERNELBENCH_CUDA, {"light_headers": False}),
    Format(
        "kernelbench-as-written",
        compile_kernelbench,
        KERNELBENCH_CUDA,
        {"split_sources": False, "light_headers": False},
    ),
    Format("workspace", compile_workspace, WORKSPACE_CU),
)


def usable(result: CompileResult, links: bool) -> bool:
    """Built, or (where torch cannot link CUDA extensions) compiled and failed only at the link."""
    return result.status is Status.OK or (not links and result.message == "Linking failed.")


@dataclasses.dataclass
class Subject:
    """One format being measured: its builder and workspace (those of its last cold run) and its figures."""

    fmt: Format
    builder: Builder | None = None
    workspace: Workspace | None = None
    figures: dict[str, Any] = dataclasses.field(default_factory=lambda: {"cold": [], "warm": []})

    def compile(self, source: str, what: str, links: bool) -> float:
        """Seconds of one compile of ``source`` (which must build, or fail only at a link that cannot work here)."""
        assert self.builder is not None and self.workspace is not None
        started = time.monotonic()
        result = self.fmt.compile(self.builder, self.workspace, source)
        seconds = time.monotonic() - started
        if not usable(result, links):
            raise SystemExit(f"{self.fmt.name} {what} compile failed: {result.message}\n{result.diagnostics[-3000:]}")
        logger.info("%s %s: %.2f s (%s)", self.fmt.name, what, seconds, result.message)
        return seconds


def measure(
    formats: list[Format],
    backend: Backend,
    runs: int,
    cold_runs: int,
    root: Path,
    links: bool,
    wait: bool,
    prepared: bool = False,
) -> dict[str, Any]:
    """Cold, warm, unchanged and broken compiles of each format (seconds of each run), the formats taking turns run
    by run, so that they share whatever else the machine runs meanwhile; ``prepared``: each cold cache holds the
    precompiled headers `cudagym prepare` makes (built before the cold compile's clock starts)."""
    task = load("builtin").get("builtin/relu")
    subjects = [Subject(fmt) for fmt in formats]
    for run in range(cold_runs):
        for subject in subjects:
            fmt = subject.fmt
            cache = Path(tempfile.mkdtemp(prefix=f"cold-{fmt.name}-{run}-", dir=root))
            options = BuildOptions(wait_for_pch=wait, timeout_seconds=COMPILE_TIMEOUT, **fmt.options)
            subject.builder = Builder(backend, cache_dir=cache, options=options)
            header_reads._HEAVY_ONLY.clear()  # the light header's guard is read anew, as in a fresh process
            subject.workspace = Workspace(task.source_for(backend.name), "benchmark", root_dir=root)
            if prepared:  # what `cudagym prepare` makes, before the clock starts
                single_file_headers(subject.builder)
                subject.builder.precompiled_header()
            source = edited(fmt.kernel, uuid.uuid4().hex[:8])
            subject.figures["cold"].append(subject.compile(source, f"cold run {run + 1}", links))
            join_background_headers()  # the header the first compile did not wait for (unmeasured)
    sources: dict[str, str] = {}
    for run in range(runs):
        for subject in subjects:
            sources[subject.fmt.name] = edited(subject.fmt.kernel, uuid.uuid4().hex[:8])
            subject.figures["warm"].append(subject.compile(sources[subject.fmt.name], f"warm run {run + 1}", links))
    for subject in subjects:
        subject.figures["unchanged"] = subject.compile(sources[subject.fmt.name], "unchanged", links)
    for error, (_, shown) in ERRORS.items():
        for subject in subjects:
            assert subject.builder is not None and subject.workspace is not None
            started = time.monotonic()
            source = edited(subject.fmt.kernel, uuid.uuid4().hex[:8], error=error)
            result = subject.fmt.compile(subject.builder, subject.workspace, source)
            subject.figures[error] = time.monotonic() - started
            if result.status is not Status.COMPILE_ERROR or shown not in result.diagnostics:
                raise SystemExit(f"{subject.fmt.name} {error} compile did not fail on its error: {result.diagnostics}")
            logger.info("%s %s: %.2f s (%s)", subject.fmt.name, error, subject.figures[error], result.message)
    return {subject.fmt.name: subject.figures for subject in subjects}


def _runs(seconds: list[float]) -> str:
    return ", ".join(f"{s:.1f}" for s in seconds)


def torch_links_cuda() -> bool:
    """Whether this torch has the CUDA libraries a CUDA extension links against."""
    import torch

    return torch.version.cuda is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cuda", choices=("cuda",))
    parser.add_argument("--arch", default="", help="sm_XX for a machine without a GPU (nvcc only); default: the GPU's")
    parser.add_argument("--runs", type=int, default=3, help="warm edits per format")
    parser.add_argument("--cold-runs", type=int, default=0, help="cold compiles per format (default: --runs)")
    parser.add_argument("--formats", default="kernelbench,kernelbench-light,workspace")
    parser.add_argument("--json", default="")
    parser.add_argument(
        "--wait-for-pch", action="store_true", help="cold compiles wait for the precompiled header (the old way)"
    )
    parser.add_argument(
        "--prepared",
        action="store_true",
        help="cold caches hold the precompiled headers `cudagym prepare` makes (a prepared machine's first compile)",
    )
    parser.add_argument(
        "--units", action="store_true", help="log each compile unit's start and end (where a cold compile's time goes)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.units:
        logging.getLogger("cudagym.build").setLevel(logging.DEBUG)
    os.environ.pop("CCACHE_DIR", None)  # a cold run starts with an empty ccache of its own
    if args.arch:
        backend = Backend(name="cuda", device="cuda", device_name="nvcc only", arch=args.arch)
    else:
        backend = resolve_backend(args.backend)
    links = torch_links_cuda()
    by_name = {f.name: f for f in FORMATS}
    chosen = [by_name[name] for name in args.formats.split(",")]
    load_before = os.getloadavg()
    cold_runs = args.cold_runs or args.runs
    with tempfile.TemporaryDirectory(prefix="cudagym-kb-compile-") as tmp:
        figures = measure(chosen, backend, args.runs, cold_runs, Path(tmp), links, args.wait_for_pch, args.prepared)
    print(
        f"\n{backend.device_name} ({backend.arch}), {os.cpu_count()} cores, {platform.node()}, {datetime.date.today()}"
    )
    if not links:
        print("torch has no CUDA libraries here: compile only (the link of a CUDA extension is not possible)")
    print(f"load average before the run: {load_before[0]:.1f}, after it: {os.getloadavg()[0]:.1f}")
    print(
        f"{'format':<24} {'cold (s)':>9} {'warm (s)':>9} {'unchanged (s)':>14} {'broken (s)':>11} {'typo (s)':>9}"
        f"   median of {cold_runs} cold, {args.runs} warm (broken, typo: one run)"
    )
    for name, f in figures.items():
        cold, warm = statistics.median(f["cold"]), statistics.median(f["warm"])
        print(f"{name:<24} {cold:>9.1f} {warm:>9.1f} {f['unchanged']:>14.2f} {f['broken']:>11.1f} {f['typo']:>9.1f}")
        print(f"{'':<24} runs: cold {_runs(f['cold'])}; warm {_runs(f['warm'])}")
    if args.json:
        record = {"device": backend.device_name, "arch": backend.arch, "cores": os.cpu_count(), "links": links}
        record["wait_for_pch"], record["prepared"] = args.wait_for_pch, args.prepared
        Path(args.json).write_text(json.dumps({**record, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
