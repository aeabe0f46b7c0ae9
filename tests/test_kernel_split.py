"""A single-file solution's CUDA source is compiled as a device unit without torch and a host unit against a
precompiled header only where the two mean what the file means (``cudagym.kernel_split``), and whole where a unit
fails: a kernel edit then recompiles the small device unit alone, and the agent only ever sees its own file's errors
(``cudagym.inline_build``).

The text tests need nothing; the builder tests stand in small headers for torch's (as tests/test_light_headers.py
does), so that a compile takes a second or two."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import RELU, compiled, stand_in_builder, stand_in_headers, stand_in_request

from cudagym.backends import find_toolchain
from cudagym.build import KILLED_AFTER, Builder, BuildOptions
from cudagym.inline_build import InlineBuilder, host_flags
from cudagym.kernel_split import LAUNCHER_PREFIX, Instances, Refused, instances, leading_includes, mask, split
from cudagym.results import CompileResult, Status
from cudagym.tasks import load
from cudagym.workspace import Workspace

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

SOURCE = """#include <torch/extension.h>
#include <cuda_runtime.h>
#define BLOCK 256
struct Scale { float factor; };
constexpr int kUnroll = 4;
__device__ __forceinline__ float twice(float v) { return 2.0f * v; }
__host__ __device__ inline int blocks_for(int n) { return (n + BLOCK - 1) / BLOCK; }
__global__ void __launch_bounds__(BLOCK) scale_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                      Scale s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;  // a comment with <<<braces>>> {
  if (i < n) y[i] = twice(x[i]) * s.factor;
}
__global__ void fill(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }
torch::Tensor scale_cuda(torch::Tensor x, float factor) {
  auto y = torch::empty_like(x);
  const char* text = "not a launch: k<<<1, 1>>>()";
  scale_kernel<<<blocks_for(x.numel()), BLOCK>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), Scale{factor}, x.numel());
  fill<<<dim3(1), dim3(32), 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), 1);
  fill<<<1, 32, 0>>>(y.data_ptr<float>(), kUnroll);
  return y;
}
"""


def test_the_split_keeps_every_line_and_gives_each_unit_its_part() -> None:
    parts = split(SOURCE, "t1")
    assert parts.kernels == ("fill", "scale_kernel")
    lines = SOURCE.count("\n")
    assert parts.device.count("\n") == lines and parts.host.count("\n") == lines
    device, host = parts.device.splitlines(), parts.host.splitlines()
    # the device unit: no torch, the kernels and device functions, a launcher after each kernel
    assert "torch" not in mask(parts.device) and "twice(x[i])" in parts.device
    assert device[0] == "" and device[1] == "#include <cuda_runtime.h>" and device[3].startswith("struct Scale")
    assert "scale_cuda" not in parts.device
    assert f"void {LAUNCHER_PREFIX}t1_scale_kernel(dim3 cudagym_grid" in device[11]
    assert "scale_kernel<<<cudagym_grid, cudagym_block, cudagym_shared, cudagym_stream>>>(x, y, s, n);" in device[11]
    # the host unit: the wrapper, launches made calls, a declaration where each kernel was, no device code
    assert not {"__global__", "twice", "threadIdx"} & set(mask(parts.host).split())
    assert host[7] == (
        f'__attribute__((visibility("hidden"))) void {LAUNCHER_PREFIX}t1_scale_kernel(dim3, dim3, size_t, cudaStream_t,'
        " const float* __restrict__ x, float* __restrict__ y, Scale s, int n);"
    )
    assert host[16] == f"  {LAUNCHER_PREFIX}t1_scale_kernel(blocks_for(x.numel()), BLOCK, 0, 0, "
    assert host[17] == "      x.data_ptr<float>(), y.data_ptr<float>(), Scale{factor}, x.numel());"
    assert host[18] == (
        f"  {LAUNCHER_PREFIX}t1_fill(dim3(1), dim3(32), 0, at::cuda::getCurrentCUDAStream(), y.data_ptr<float>(), 1);"
    )
    assert host[19] == f"  {LAUNCHER_PREFIX}t1_fill(1, 32, 0, 0, y.data_ptr<float>(), kUnroll);"
    assert 'const char* text = "not a launch: k<<<1, 1>>>()";' in parts.host  # literals untouched
    # both units: the macro, the type, the constant, the host-and-device function
    for shared in ("#define BLOCK 256", "struct Scale { float factor; };", "constexpr int kUnroll = 4;", "blocks_for"):
        assert shared in parts.device and shared in parts.host


def test_a_launch_without_arguments_and_a_kernel_declared_before_its_definition() -> None:
    source = "__global__ void tick();\nvoid run() { tick<<<1, 1>>>(); }\n__global__ void tick() {}\n"
    parts = split(source, "t2")
    host = parts.host.splitlines()
    assert host[0].endswith(f"void {LAUNCHER_PREFIX}t2_tick(dim3, dim3, size_t, cudaStream_t);")
    assert host[1] == f"void run() {{ {LAUNCHER_PREFIX}t2_tick(1, 1, 0, 0); }}"
    assert parts.device.splitlines()[0] == "__global__ void tick();"
    assert parts.device.splitlines()[2].endswith(
        "{ tick<<<cudagym_grid, cudagym_block, cudagym_shared, cudagym_stream>>>(); }"
    )


TEMPLATE_KERNEL = (
    "template <typename scalar_t, int B = 32>\n"
    "__global__ void tk(scalar_t* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = (scalar_t)B; }  // EDIT\n"
)
# a dispatch as torch's AT_DISPATCH macros make one: the launch in a lambda, scalar_t an alias per type
TEMPLATE_HOST = (
    "#define DISPATCH(...) do { { using scalar_t = float; __VA_ARGS__(); } { using scalar_t = double; __VA_ARGS__(); } "
    "} while (0)\n"
    "int host_value(void* y) {\n"
    "  DISPATCH([&] { tk<scalar_t><<<1, 32>>>((scalar_t*)y, 4); });\n"
    "  tk<float, 64>\n    <<<1, 32>>>((float*)y, 4);\n"
    "  tk<<<1, 32>>>((float*)y, 2);  // deduced\n"
    "  return heavy_value();\n}\n"
)


def test_a_template_kernel_gets_a_template_launcher_and_its_launches_keep_their_arguments() -> None:
    parts = split(TEMPLATE_KERNEL + TEMPLATE_HOST, "t4")
    assert parts.templates == ("tk",) and parts.device.count("\n") == parts.host.count("\n")
    host, device = parts.host.splitlines(), parts.device.splitlines()
    launcher = f"{LAUNCHER_PREFIX}t4_tk"
    assert host[0] == (
        f'template <typename scalar_t, int B = 32> __attribute__((visibility("hidden"))) void {launcher}(dim3, dim3,'
        " size_t, cudaStream_t, scalar_t* y, int n);"
    )
    assert host[4] == f"  DISPATCH([&] {{ {launcher}<scalar_t>(1, 32, 0, 0, (scalar_t*)y, 4); }});"
    assert (host[5], host[6]) == (f"  {launcher}<float, 64>", "    (1, 32, 0, 0, (float*)y, 4);")
    assert host[7].startswith(f"  {launcher}(1, 32, 0, 0, (float*)y, 2);")
    assert "{ tk<scalar_t, B><<<cudagym_grid, cudagym_block, cudagym_shared, cudagym_stream>>>(y, n); }" in device[1]
    assert "} template <typename scalar_t, int B = 32> __attribute__" in device[1]
    # what the host object leaves undefined (nm -C) becomes the device unit's explicit uses; torch's types cannot be
    symbols = [f"                 U void {launcher}<double, 32>(dim3, dim3, unsigned long, CUstream_st*, double*, int)"]
    made = instances(symbols, "t4", parts.templates)
    assert f"&{launcher}<double, 32>)" in made.text and made.headers == ()
    assert instances(["                 U cudaLaunchKernel"], "t4", parts.templates) == Instances()
    # torch's scalar types come from their light headers, included first; its other types cannot be spelt
    half = instances([f"U void {launcher}<c10::Half, 32>(dim3)", f"U void {launcher}<c10::BFloat16, 8>(dim3)"], "t4",
                     parts.templates)  # fmt: skip
    assert f"&{launcher}<c10::Half, 32>)" in half.text and f"&{launcher}<c10::BFloat16, 8>)" in half.text
    assert half.headers == ("c10/util/BFloat16.h", "c10/util/Half.h")
    for unspellable in ("c10::complex<float>, 32", "at::Tensor, 32", "(anonymous namespace)::T, 32"):
        with pytest.raises(Refused):
            instances([f"U void {launcher}<{unspellable}>(dim3)"], "t4", parts.templates)


REFUSED = {
    "explicit specialisation": "template <typename T> __global__ void k(T* y) {}\n"
    "template <> __global__ void k<int>(int* y) {}\nvoid f(float* y) { k<float><<<1, 1>>>(y); }\n",
    "template parameter pack": "template <typename... T> __global__ void k(T... y) {}\n"
    "void f(float* y) { k<<<1, 1>>>(y); }\n",
    "template template parameter": "template <template <typename> class C, typename T> __global__ void k(T* y) {}\n"
    "void f(float* y) { k<C><<<1, 1>>>(y); }\n",
    "template arguments of a plain kernel": "__global__ void k(float* y) {}\nvoid f(float* y) { k<1><<<1, 1>>>(y); }\n",
    "compiler macro": "__global__ void k() {\n#ifdef __CUDA_ARCH__\n#endif\n}\nvoid f() { k<<<1, 1>>>(); }\n",
    "kernel address": "__global__ void k() {}\n"
    "void f() { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 1); k<<<1, 1>>>(); }\n",
    "device symbol": "__constant__ float w[4];\n__global__ void k() {}\n"
    "void f(const float* h) { cudaMemcpyToSymbol(w, h, 16); k<<<1, 1>>>(); }\n",
    "unknown kernel": "__global__ void k() {}\nvoid f() { other<<<1, 1>>>(); }\n",
    "device lambda": "__global__ void k() {}\n"
    "void f() { auto g = [] __device__ (int i) { return i; }; k<<<1, 1>>>(); }\n",
    "torch in device code": "__global__ void k(at::Half* y) {}\nvoid f(at::Half* y) { k<<<1, 1>>>(y); }\n",
    "macro launch": "__global__ void k() {}\n#define LAUNCH k<<<1, 1>>>()\nvoid f() { LAUNCH; }\n",
    "namespace": "namespace ops {\n__global__ void k() {}\n}\nvoid f() { ops::k<<<1, 1>>>(); }\n",
    "raw string": '__global__ void k() {}\nconst char* s = R"(x)";\nvoid f() { k<<<1, 1>>>(); }\n',
    "unnamed parameter": "__global__ void k(float*) {}\nvoid f(float* y) { k<<<1, 1>>>(y); }\n",
    "default argument": "__global__ void k(float* y, int n = 1) {}\nvoid f(float* y) { k<<<1, 1>>>(y); }\n",
    "non-inline host-device function": "__host__ __device__ int g(int n) { return n; }\n__global__ void k() {}\n",
    "overloaded kernel": "__global__ void k(float* y) {}\n__global__ void k(int* y) {}\n"
    "void f(float* y) { k<<<1, 1>>>(y); }\n",
    "no kernel": "int f() { return 1; }\n",
    "side effect in a launch": "__global__ void k(int n) {}\nvoid f(int n) { k<<<n++, 1>>>(n); }\n",
    "carriage returns": "#define SCALE \\\r\n  2.0f\r\n__global__ void k(float* y) { y[0] = SCALE; }\r\n"
    "void f(float* y) { k<<<1, 1>>>(y); }\r\n",
    "continued comment": "// a note \\\n__global__ void k() {}\nvoid f() { k<<<1, 1>>>(); }\n",
    "continued line": "__global__ void k() {}\nvoid f() { k<<<1, \\\n 1>>>(); }\n",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_source_whose_split_could_mean_something_else_is_refused(case: str) -> None:
    with pytest.raises(Refused):
        split(REFUSED[case], "t3")


def test_the_precompiled_header_holds_the_leading_includes_where_torch_is_among_them() -> None:
    assert leading_includes("#include <torch/types.h>\n\n#include <cuda.h>\nint x;\n#include <vector>\n") == (
        "#include <torch/types.h>\n#include <cuda.h>\n"
    )
    assert leading_includes("#include <cuda.h>\nint x;\n") == ""


def test_host_flags_are_what_nvcc_hands_the_host_compiler() -> None:
    flags = host_flags(["-O3", "--use_fast_math", "-DFOO=1", "-U", "BAR", "-Xcompiler", "-fopenmp,-Wall", "-lineinfo"])
    assert flags[-7:] == ["-O3", "-DFOO=1", "-U", "BAR", "-fopenmp", "-Wall", "-std=c++20"]
    assert "-D__CUDA_NO_HALF_OPERATORS__" in flags and "--use_fast_math" not in flags
    assert host_flags(["--std=c++17"])[-1] == "-std=c++17"


# -- the builder, with stand-in headers ------------------------------------------------------------------------------

TYPES_STAND_IN = "#pragma once\ninline int light_value() { return 1; }\n"
EXTENSION_STAND_IN = (
    "#pragma once\n#include <torch/types.h>\ninline int heavy_value() { return 2; }\n#define HEAVY 1\n"
    # macros a kernel may use as torch's own (CUDA_KERNEL_LOOP, __ubsan_ignore_undefined__): only the file sees them
    "#define HEAVY_LOOP(i, n) for (int i = 0; i < (n); ++i)\n#define HEAVY_ATTRIBUTE __attribute__((unused))\n"
    '#define HEAVY_UNROLL _Pragma("unroll")\n'
    "__device__ inline float heavy_device(float v) { return v; }\n"
)
KERNEL = "__global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }  // EDIT\n"
# kThreads: a constant only the host unit uses, of which nvcc warns in the device unit (a warning the file itself
# does not give, so not the agent's)
HOST = "const int kThreads = 32;\nint host_value(float* y) { k<<<1, kThreads>>>(y, 4); return heavy_value(); }\n"


def request(cuda: str) -> dict[str, Any]:
    return stand_in_request(cuda, "split_ext")


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    return stand_in_headers(tmp_path, TYPES_STAND_IN, EXTENSION_STAND_IN)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(load("builtin").get(RELU).source_for("cuda"), "kernel split test", root_dir=tmp_path)


@pytest.fixture(autouse=True)
def links_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Extensions link where torch has no CUDA libraries too (these tests' units use none of them): a link error
    then means what it would on a GPU machine."""
    real = Builder._link_flags
    missing = {f"-l{name}" for name in ("c10_cuda", "torch_cuda")}
    missing = {flag for flag in missing if not list(Path(find_toolchain().torch_lib).glob(f"lib{flag[2:]}.so*"))}
    monkeypatch.setattr(
        Builder, "_link_flags", lambda self, extra=(): [f for f in real(self, extra) if f not in missing]
    )


def builder(cache: Path, stand_in: Path, **options: Any) -> InlineBuilder:
    """A builder on the stand-in torch headers of ``stand_in`` with ``options``; it builds precompiled headers only
    where they ask for them (``use_pch=True``: it would build them of the stand-ins in the background, and a later
    compile against one is a compile these tests do not count)."""
    return InlineBuilder(stand_in_builder(cache, stand_in, BuildOptions(**{"use_pch": False, **options})))


def was_split(result: CompileResult) -> bool:
    return any("split/cuda.cu" in command for command in result.commands)


def failed_splits(cache: Path) -> list[Path]:
    return list((cache / "split" / "failed").glob("*"))


def symbols(objects: list[Path]) -> tuple[set[str], set[str]]:
    """(the launchers the objects use, those they define)."""
    used, defined = set(), set()
    for obj in objects:
        for line in subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.splitlines():
            fields = line.split()
            if LAUNCHER_PREFIX in fields[-1]:
                (used if fields[-2] == "U" else defined).add(fields[-1])
    return used, defined


def assert_compiled_whole(
    cache: Path, stand_in: Path, source: str, workspace: Workspace, include_paths: list[str] | None = None
) -> None:
    """``source`` (of a request with ``include_paths``) builds whole (not split, its split remembered as failed once),
    as the agent wrote it."""
    asked = {**request(source), "extra_include_paths": include_paths or []}
    _, result = builder(cache, stand_in, light_headers=False).build(asked, workspace)
    assert result.status is Status.OK and not was_split(result), result.diagnostics
    assert len(failed_splits(cache)) == 1


def fresh(text: str) -> str:
    return f"{text}// {uuid.uuid4().hex}\n"  # new to every cache


@needs_nvcc
def test_a_split_source_compiles_in_two_units_whose_launchers_meet_and_a_kernel_edit_recompiles_one(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    cache = tmp_path / "cache"
    inline = builder(cache, stand_in)
    source = fresh(f"#include <torch/extension.h>\n{KERNEL}{HOST}")
    _, first = inline.build(request(source), workspace)
    assert first.status is Status.OK, first.diagnostics  # the units link: the launches find their launchers
    assert was_split(first) and first.objects_compiled == 3 and not failed_splits(cache)  # main.cpp, device, host
    assert "kThreads" not in first.diagnostics and "split/" not in first.diagnostics
    used, defined = symbols(sorted((cache / "objects").glob("*.o")))
    assert used and used <= defined  # the host unit's launches find their launchers
    edited = source.replace("y[threadIdx.x] = 1.0f;", "y[threadIdx.x] = 2.0f;")
    _, again = inline.build(request(edited), workspace)
    assert again.status is Status.OK and was_split(again), again.diagnostics
    assert again.objects_compiled == 1 and again.objects_reused == 2  # the device unit alone


@needs_nvcc
def test_a_host_unit_whose_request_has_include_paths_asks_for_no_precompiled_header(
    tmp_path: Path, stand_in: Path, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A header is built where the workspace's headers are not visible (the compiler sandbox shows it none). With the
    request's include paths a leading ``<...>`` may be one of their files: built without them, the header would
    fail, or compile a system header of the same name (torch's own ``torch/extension.h`` took minutes, beside
    everything else) whose guard would then hide the workspace's. So the host unit asks for none, though its builder
    builds precompiled headers, and compiles against what the include paths hold."""
    asked: list[str] = []
    monkeypatch.setattr(
        Builder, "precompiled_header", lambda self, text="", flags=None, *, wait=True: asked.append(text)
    )
    source = fresh(f"#include <torch/extension.h>\n{KERNEL}{HOST}")
    with_includes = {**request(source), "extra_include_paths": ["kernels"]}
    _, result = builder(tmp_path / "cache", stand_in, use_pch=True).build(with_includes, workspace)
    assert compiled(result) and was_split(result), result.diagnostics
    assert not any("torch/extension.h" in text for text in asked), asked


@needs_nvcc
def test_a_split_that_fails_to_compile_gives_way_to_the_file_and_is_not_tried_again(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # the kernel needs a macro of the stand-in torch header, which the device unit does not include
    cache = tmp_path / "cache"
    source = fresh(f"#include <torch/extension.h>\n{KERNEL.replace('1.0f', 'HEAVY')}{HOST}")
    _, first = builder(cache, stand_in, light_headers=False).build(request(source), workspace)
    assert compiled(first) and not was_split(first), first.diagnostics
    assert len(failed_splits(cache)) == 1 and "split/" not in first.diagnostics
    _, again = builder(cache, stand_in, light_headers=False).build(request(source), workspace)
    assert compiled(again) and again.objects_compiled == 0, again.message


@needs_nvcc
def test_a_kernel_naming_what_nothing_declares_shows_the_errors_of_the_file_without_compiling_it_whole(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    source = fresh(f"#include <torch/extension.h>\n{KERNEL.replace('1.0f;', 'undeclared_thing;')}{HOST}")
    cache = tmp_path / "split"
    _, result = builder(cache, stand_in).build(request(source), workspace)
    _, whole = builder(tmp_path / "whole", stand_in, split_sources=False).build(request(source), workspace)
    assert result.status is Status.COMPILE_ERROR and result.message == "Compilation failed in cuda.cu."
    assert "split/" not in result.diagnostics and "undeclared_thing" in result.diagnostics
    assert result.diagnostics.replace("<cache>", "") == whole.diagnostics.replace("<cache>", "")
    assert was_split(result) and not failed_splits(cache), result.commands
    assert not (cache / "light" / "failed").exists() and not any("light/" in c for c in result.commands)  # not whole
    assert len(list((cache / "split" / "words").glob("*.json"))) == 1  # the stand-in torch header's words


@needs_nvcc
def test_a_kernel_naming_a_host_variable_shows_the_errors_of_the_file_as_written(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # the device unit may lack the host variable altogether; the file as written says something else of it
    source = fresh(
        f"#include <torch/extension.h>\nint host_count = 32;\n{KERNEL.replace('1.0f;', 'host_count;')}{HOST}"
    )
    cache = tmp_path / "split"
    _, result = builder(cache, stand_in, light_headers=False).build(request(source), workspace)
    _, whole = builder(tmp_path / "whole", stand_in, split_sources=False, light_headers=False).build(
        request(source), workspace
    )
    assert result.status is Status.COMPILE_ERROR and "host_count" in result.diagnostics, result.diagnostics
    assert result.diagnostics.replace("<cache>", "") == whole.diagnostics.replace("<cache>", "")
    assert len(failed_splits(cache)) == 1


TYPOS = {
    "a missing semicolon": ("1.0f; }", "1.0f }"),
    "too few arguments": ("y[threadIdx.x] = 1.0f;", "y[threadIdx.x] = fminf(1.0f);"),
    "a value of the wrong type": ("y[threadIdx.x] = 1.0f;", "y[threadIdx.x] = y;"),
    "a missing semicolon in a template kernel": ("(scalar_t)B; }", "(scalar_t)B }"),
}


@needs_nvcc
@pytest.mark.parametrize("typo", sorted(TYPOS))
def test_a_typo_in_a_kernel_shows_the_split_errors_in_the_file_s_name_without_compiling_it_whole(
    typo: str, tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    good, bad = TYPOS[typo]
    kernel, host = (TEMPLATE_KERNEL, TEMPLATE_HOST) if "template" in typo else (KERNEL, HOST)
    assert good in kernel
    source = fresh(f"#include <torch/extension.h>\n{kernel.replace(good, bad)}{host}")
    cache = tmp_path / "split"
    _, result = builder(cache, stand_in).build(request(source), workspace)
    _, whole = builder(tmp_path / "whole", stand_in, split_sources=False, light_headers=False).build(
        request(source), workspace
    )
    assert result.status is Status.COMPILE_ERROR and result.message == "Compilation failed in cuda.cu."
    assert was_split(result) and not failed_splits(cache), result.commands
    assert not (cache / "light" / "failed").exists() and not any("light/" in c for c in result.commands)  # not whole
    assert "split/" not in result.diagnostics and "cudagym_launch" not in result.diagnostics
    assert result.diagnostics.replace("<cache>", "") == whole.diagnostics.replace("<cache>", "")


KERNELS_OF_TORCH_MACROS = {
    "a loop": "__global__ void k(float* y, int n) { HEAVY_LOOP(i, n) y[i] = 1.0f; }\n",
    "an attribute": "__global__ void k(float* y, int n) { HEAVY_ATTRIBUTE int z = 0; y[0] = n + z; }\n",
    "a declaration's attribute": "__device__ HEAVY_ATTRIBUTE float one() { return 1.0f; }\n"
    "__global__ void k(float* y, int n) { y[0] = one() * n; }\n",
    "a pragma": "__global__ void k(float* y, int n) { HEAVY_UNROLL for (int i = 0; i < 4; ++i) y[i] = n; }\n",
    "a device function": "__global__ void k(float* y, int n) { y[0] = heavy_device(n); }\n",
}


@needs_nvcc
@pytest.mark.parametrize("use", sorted(KERNELS_OF_TORCH_MACROS))
def test_a_kernel_using_a_macro_of_torch_s_headers_is_no_typo_and_compiles_whole(
    use: str, tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # the device unit, without torch's headers, fails on the macro: what the agent gets is the file's build
    cache = tmp_path / "cache"
    source = fresh(f"#include <torch/extension.h>\n{KERNELS_OF_TORCH_MACROS[use]}{HOST}")
    assert_compiled_whole(cache, stand_in, source, workspace)


@needs_nvcc
def test_a_kernel_using_what_its_own_header_declares_where_torch_s_macro_is_defined_compiles_whole(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # the device unit, without torch's headers, does not get the declaration; the file as written does
    (workspace.path / "kernels" / "guarded.cuh").write_text(
        "#pragma once\n#ifdef HEAVY\n__device__ inline float guarded_value() { return 1.0f; }\n#endif\n"
    )
    cache = tmp_path / "cache"
    kernel = "__global__ void k(float* y, int n) { y[0] = guarded_value() * n; }\n"
    source = fresh(f'#include <torch/extension.h>\n#include "guarded.cuh"\n{kernel}{HOST}')
    assert_compiled_whole(cache, stand_in, source, workspace, include_paths=["kernels"])


@needs_nvcc
def test_a_refused_source_compiles_whole_with_no_split_tried(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    template = (
        "template <int... N> __global__ void t(float* y) { y[0] = 1; }\nvoid run(float* y) { t<1><<<1, 1>>>(y); }\n"
    )
    _, result = builder(tmp_path / "cache", stand_in).build(request(fresh(template)), workspace)
    assert compiled(result) and not was_split(result) and not failed_splits(tmp_path / "cache"), result.diagnostics


@needs_nvcc
def test_a_split_whose_link_fails_on_a_symbol_gives_way_to_the_file(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # a header of device code: the host unit (the C++ compiler) takes its kernel for a host function, which the
    # device unit's launch stub defines too
    (workspace.path / "kernels" / "device_code.cuh").write_text(
        "#pragma once\n__global__ void other(float* y) { y[0] = 1; }\n"
    )
    cache = tmp_path / "cache"
    source = fresh(f'#include <torch/extension.h>\n#include "device_code.cuh"\n{KERNEL}{HOST}')
    assert_compiled_whole(cache, stand_in, source, workspace, include_paths=["kernels"])


@needs_nvcc
def test_a_template_kernel_is_split_its_instances_made_for_the_host_unit_and_an_edit_recompiles_one(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    cache = tmp_path / "cache"
    source = fresh(f"#include <torch/extension.h>\n{TEMPLATE_KERNEL}{TEMPLATE_HOST}")
    _, first = builder(cache, stand_in).build(request(source), workspace)
    assert first.status is Status.OK and was_split(first) and not failed_splits(cache), first.diagnostics
    assert first.objects_compiled == 3 and any(command.endswith("split/cuda_host.cpp") for command in first.commands)
    used, defined = symbols(sorted((cache / "objects").glob("*.o")))
    assert len(used) == 3 and used <= defined  # <float, 32>, <double, 32>, <float, 64>: each launcher instance made
    _, again = builder(cache, stand_in).build(request(source.replace("(scalar_t)B;", "(scalar_t)(B + 1);")), workspace)
    assert again.status is Status.OK and was_split(again), again.diagnostics
    assert again.objects_compiled == 1 and again.objects_reused == 2  # the device unit alone


@needs_nvcc
def test_a_template_split_compiles_main_cpp_its_first_way_beside_its_host_unit(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # main.cpp passes the binding headers' guard (stand-ins here): its lighter copy is what compiles beside the host
    # unit before the build, not the file as written, which the build would then compile again the lighter way
    (stand_in / "torch" / "csrc" / "utils").mkdir(parents=True)
    (stand_in / "torch" / "csrc" / "utils" / "pybind.h").write_text("#pragma once\n")
    (stand_in / "torch" / "csrc" / "Exceptions.h").write_text("#pragma once\n")
    cache = tmp_path / "cache"
    source = fresh(f"#include <torch/extension.h>\n{TEMPLATE_KERNEL}{TEMPLATE_HOST}")
    asked = {**request(source), "cpp_sources": [fresh("#include <torch/extension.h>\nint bound() { return 1; }\n")]}
    _, result = builder(cache, stand_in).build(asked, workspace)
    assert result.status is Status.OK and was_split(result), result.diagnostics
    mains = [command for command in result.commands if "main.cpp" in command]
    assert len(mains) == 1 and "light/main.cpp" in mains[0] and result.objects_compiled == 3, result.commands


@needs_nvcc
def test_a_template_kernel_instantiated_with_torch_s_half_is_split_and_its_device_unit_includes_half_alone(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # as AT_DISPATCH_FLOATING_TYPES_AND_HALF instantiates a kernel: c10::Half, which torch/extension.h brings to the
    # file and the host unit; the device unit gets the type's own header (a stand-in here), never torch's
    (stand_in / "c10" / "util").mkdir(parents=True)
    (stand_in / "c10" / "util" / "Half.h").write_text(
        "#pragma once\nnamespace c10 {\n"
        "struct Half { unsigned short x; __host__ __device__ Half(float v) : x(v) {} };\n}\n"
    )
    cache = tmp_path / "cache"
    host = "int host_value(void* y) { tk<c10::Half><<<1, 32>>>((c10::Half*)y, 4); return heavy_value(); }\n"
    source = fresh(f"#include <torch/extension.h>\n#include <c10/util/Half.h>\n{TEMPLATE_KERNEL}{host}")
    _, result = builder(cache, stand_in).build(request(source), workspace)
    assert result.status is Status.OK and was_split(result) and not failed_splits(cache), result.diagnostics
    assert any("-include c10/util/Half.h" in command and "split/cuda.cu" in command for command in result.commands)
    used, defined = symbols(sorted((cache / "objects").glob("*.o")))
    assert len(used) == 1 and used <= defined  # the launcher's <c10::Half, 32> instance


@needs_nvcc
def test_a_template_split_whose_host_unit_the_timeout_ended_is_tried_again_next_time(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    cache = tmp_path / "cache"
    source = fresh(f"#include <torch/extension.h>\n{TEMPLATE_KERNEL}{TEMPLATE_HOST}")
    _, result = builder(cache, stand_in, timeout_seconds=0.01).build(request(source), workspace)
    assert result.status is Status.COMPILE_ERROR and KILLED_AFTER in result.diagnostics, result.diagnostics
    assert not failed_splits(cache)  # a timeout says nothing of the split
    _, again = builder(cache, stand_in).build(request(source), workspace)
    assert again.status is Status.OK and was_split(again), again.diagnostics
