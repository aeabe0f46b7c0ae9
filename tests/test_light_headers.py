"""A single-file solution's CUDA source is compiled against ``torch/types.h`` in place of ``torch/extension.h`` only
where that cannot change it, and as written where the lighter copy fails: a source that needs the heavy headers still
builds, and a broken one shows its own errors (``cudagym.light_headers``, ``cudagym.inline_build``).

The builder-level tests stand in small headers for torch's (a folder outside the workspace, the torch include folder
of their builders' toolchain: ``cudagym_testing.StandInToolchain``), so that nvcc compiles them in a second or two; the
last tests read the guards from torch's own headers (preprocessor runs, no compile)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import NVCC_ONLY, RELU, compiled, stand_in_builder, stand_in_headers, stand_in_request

from cudagym import kernel_split
from cudagym.build import Builder, BuildOptions
from cudagym.inline_build import InlineBuilder, inline_sources
from cudagym.light_headers import (
    BINDING_PROBE,
    HeavyOnly,
    code_of,
    declared_variables,
    heavy_only,
    lighter,
    lighter_binding,
)
from cudagym.results import CompileResult, Status
from cudagym.tasks import load
from cudagym.workspace import Workspace
from cudagym.workspace_headers import WorkspaceHeaders

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

# -- the rewrite and the guard, as text ------------------------------------------------------------------------------


def test_the_lighter_copy_replaces_the_heavy_include_lines_and_nothing_else() -> None:
    source = '#include <torch/extension.h>\n  # include "torch/torch.h"  // all of it\nint x;\n#include <torch/all.h>\n'
    light = lighter(source)
    assert light == "#include <torch/types.h>\n#include <torch/types.h>\nint x;\n#include <torch/types.h>\n"
    assert light.count("\n") == source.count("\n")  # the same lines: __LINE__ and diagnostics hold


@pytest.mark.parametrize(
    "source",
    [
        "#include <torch/types.h>\nint x;\n",  # nothing heavy
        '#include <torch/extension.h>\nconst char* s = R"(\n#include <torch/extension.h>\n)";\n',  # a raw string
        '#define TEXT "a\\\n#include <torch/extension.h>\n"\n',  # continued from the line before
        "/* #include <torch/extension.h> */ int x;\n",  # not a line of its own
        '#include <torch/extension.h"\n',  # a malformed include stays the error it is
    ],
)
def test_no_lighter_copy_where_the_edit_could_reach_into_a_literal_or_there_is_nothing_to_replace(source: str) -> None:
    assert lighter(source) is None


def test_a_string_that_ends_in_r_is_no_raw_string() -> None:
    assert lighter('#include <torch/extension.h>\nconst char* e = "CUDA ERROR";\n') is not None


def test_code_of_leaves_out_comments_literals_header_names_and_directive_words() -> None:
    code = code_of(
        "#include <c10/cuda/x.h>\n#ifdef MACRO_A // note_b\nint f() { return g(\"text_c\", 'd'); } /* e\nf */\n"
        "#if __has_include(<h_dir/i.h>)\n#endif\n"
    )
    words = set(code.split()) | {w for w in code.replace("(", " ").replace(")", " ").split()}
    assert {"MACRO_A", "f", "g"} <= words
    assert not {"c10", "note_b", "text_c", "d", "e", "h_dir", "i", "ifdef", "include"} & words


def test_declared_variables_are_the_names_after_a_type() -> None:
    code = "__global__ void k(const float* x, int n) { float acc = 0; __shared__ float Bs[32]; return acc; }"
    found = declared_variables(code)
    assert {"x", "n", "acc", "Bs"} <= found and "k" not in found
    # at namespace scope a variable could clash with a heavy header's name (an error the light copy would hide)
    assert "link" not in declared_variables("__device__ int link = 0;\nint f(int v) { return v + link; }")


ADDITIONS = HeavyOnly(macros=frozenset({"HEAVY_MACRO"}), names=frozenset({"heavy_fn", "acc", "__restrict__"}))


@pytest.mark.parametrize(
    ("source", "blocked_by"),
    [
        ("int f() { return heavy_fn(); }", "heavy_fn"),
        ("#ifdef HEAVY_MACRO\nint f();\n#endif\n", "HEAVY_MACRO"),
        ("int HEAVY_MACRO = 1;", "HEAVY_MACRO"),  # a macro expands whatever the source declares
        ("void f(py::object o);", "py"),
        ("PyObject* f();", "PyObject"),
        ("int f() { float acc = 1; return acc; }", None),  # its own variable hides the heavy name
        ("int f() { return 1; } // heavy_fn", None),  # a comment names nothing
        ("void f(float* __restrict__ x);", None),  # the compiler's own word, not the heavy headers'
    ],
)
def test_the_guard_refuses_a_source_whose_names_the_heavy_headers_could_change(
    source: str, blocked_by: str | None
) -> None:
    reason = ADDITIONS.blocks(source)
    assert (reason is None) if blocked_by is None else (reason is not None and repr(blocked_by) in reason), reason


def test_heavy_only_reads_new_and_changed_macros_and_names_from_the_preprocessed_probe() -> None:
    preprocessed = (
        '# 1 "/tmp/x/heavy_probe.cu"\n#define KEPT 1\n#define CHANGED 1\n#define GONE 1\n'
        "namespace at { int light_fn(); struct Tensor { int heavy_member_seen_in_light; }; }\n"
        '# 2 "/tmp/x/heavy_probe.cu" 2\n'
        "#define KEPT 1\n#define CHANGED 2\n#undef GONE\n#define NEW(x) x\n"
        'namespace torch { int heavy_fn(int heavy_param); int light_fn(); const char* s = "in_a_string"; }\n'
        "int heavy_member_seen_in_light();\n"
    )
    additions = heavy_only(preprocessed)
    assert additions.macros == {"CHANGED", "GONE", "NEW"}
    assert {"torch", "heavy_fn", "heavy_param"} <= additions.names
    assert not {"light_fn", "heavy_member_seen_in_light", "in_a_string", "KEPT", "at", "int"} & additions.names


def test_a_binding_file_lighter_copy_includes_the_binding_headers_and_keeps_its_line_numbers() -> None:
    source = "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x);\n#include <torch/extension.h>\n"
    light = lighter_binding(source)
    assert light is not None
    head, _, body = light.partition("#line 1\n")
    assert head.splitlines() == [
        "#include <torch/csrc/utils/pybind.h>",
        "#include <torch/csrc/Exceptions.h>",
        "#include <torch/types.h>",
    ]
    assert body == lighter(source) and body.count("\n") == source.count("\n")  # line 1 is the file's own line 1


@pytest.mark.parametrize(
    "source",
    [
        "#define PYBIND11_DETAILED_ERROR_MESSAGES\n#include <torch/extension.h>\n",  # could steer the binding headers
        "torch::Tensor f(torch::Tensor x);\n",  # no heavy include (load_inline's no_implicit_headers)
    ],
)
def test_no_lighter_binding_copy_of_a_file_that_does_not_begin_with_the_heavy_include(source: str) -> None:
    assert lighter_binding(source) is None


BINDING_SOURCE = (
    "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x);\n"
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def("f", torch::wrap_pybind_function(f), "");\n}'
)


def binding_probe_output(heavy: str) -> str:
    light = "namespace pybind11 { template <class T> struct type_caster; } namespace torch { struct Tensor; }\n"
    return f'# 1 "/tmp/x/heavy_probe.cpp"\n{light}# 4 "/tmp/x/heavy_probe.cpp" 2\n{heavy}\n'


def test_a_binding_guard_lets_a_source_name_pybind11_unless_the_heavy_headers_add_a_type_caster() -> None:
    plain = heavy_only(binding_probe_output("namespace torch { int nn_fn(); }"), BINDING_PROBE, "heavy_probe.cpp")
    assert plain.python_kept and plain.blocks(BINDING_SOURCE) is None
    assert plain.blocks(BINDING_SOURCE.replace("torch::Tensor x", "int x = torch::nn_fn()")) is not None
    # a caster only the heavy headers declare would change what the binding converts: Python's names block again
    caster = "namespace pybind11 { template <> struct type_caster<torch::Tensor> {}; }"
    changed = heavy_only(binding_probe_output(caster), BINDING_PROBE, "heavy_probe.cpp")
    assert not changed.python_kept and "PYBIND11_MODULE" in (changed.blocks(BINDING_SOURCE) or "")
    # the probe of a CUDA file keeps the Python rule whatever its heavy part holds
    cuda = heavy_only('# 1 "/tmp/x/heavy_probe.cu"\nint a;\n# 2 "/tmp/x/heavy_probe.cu" 2\nint b;\n')
    assert not cuda.python_kept


# -- the builder, with stand-in headers ------------------------------------------------------------------------------

LIGHT_STAND_IN = "#pragma once\nstruct LightThing { int shared_name; };\ninline int light_value() { return 1; }\n"
HEAVY_STAND_IN = (
    "#pragma once\n#include <torch/types.h>\n"
    "inline int heavy_value() { return 2; }\ninline int shared_name() { return 3; }\n#define HEAVY_MACRO 4\n"
)


def request(cuda: str) -> dict[str, Any]:
    """A load_inline request of the CUDA source ``cuda``, new to every cache (built by :func:`builder`, it sees the
    stand-in torch headers)."""
    return stand_in_request(f"{cuda}\n// {uuid.uuid4().hex}\n", "light_ext")


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """The stand-in torch headers, the binding headers of a lighter ``main.cpp`` among them."""
    bindings = {
        "torch/csrc/utils/pybind.h": "#pragma once\ninline int bound_value() { return 5; }\n",
        "torch/csrc/Exceptions.h": "#pragma once\n",
    }
    return stand_in_headers(tmp_path, LIGHT_STAND_IN, HEAVY_STAND_IN, **bindings)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(load("builtin").get(RELU).source_for("cuda"), "light header test", root_dir=tmp_path)


def builder(cache: Path, stand_in: Path, *, light: bool = True) -> InlineBuilder:
    """A builder on the stand-in torch headers of ``stand_in`` that never splits a file (``cudagym.kernel_split``,
    tests/test_kernel_split.py): the light header's way is the first it tries. It builds no precompiled header (it
    would build them of the stand-ins in the background, and a later compile against one is a compile these tests do
    not count)."""
    options = BuildOptions(light_headers=light, split_sources=False, use_pch=False)
    return InlineBuilder(stand_in_builder(cache, stand_in, options))


def used_light(result: CompileResult) -> bool:
    return any("light/cuda.cu" in command for command in result.commands)


def heavy_markers(cache: Path) -> list[Path]:
    return list((cache / "light" / "failed").glob("*"))


KERNEL = "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n"


@needs_nvcc
def test_a_source_that_needs_only_the_light_header_compiles_against_it_once(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    inline = builder(tmp_path / "cache", stand_in)
    asked = request(f"#include <torch/extension.h>\n{KERNEL}int host_value() {{ return light_value(); }}\n")
    _, first = inline.build(asked, workspace)
    assert compiled(first), first.diagnostics
    assert used_light(first) and first.objects_compiled == 2 and not heavy_markers(tmp_path / "cache")
    _, again = inline.build(asked, workspace)  # unchanged: nothing compiles again
    assert compiled(again) and again.objects_compiled == 0 and again.objects_reused == 2, again.message


@needs_nvcc
def test_a_source_that_needs_the_heavy_header_still_builds_as_written(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # shared_name is in the light header's text (a member), so the guard lets the copy be tried; the copy fails to
    # compile (no such function there) and the source as written builds
    inline = builder(tmp_path / "cache", stand_in)
    asked = request(f"#include <torch/extension.h>\n{KERNEL}int host_value() {{ return shared_name(); }}\n")
    _, first = inline.build(asked, workspace)
    assert compiled(first), first.diagnostics
    assert not used_light(first) and len(heavy_markers(tmp_path / "cache")) == 1
    assert "shared_name" not in first.diagnostics  # the copy's errors are not the agent's
    _, again = inline.build(asked, workspace)  # the copy is not tried again
    assert compiled(again) and again.objects_compiled == 0, again.message


@needs_nvcc
def test_a_broken_source_shows_its_own_errors(tmp_path: Path, stand_in: Path, workspace: Workspace) -> None:
    broken = request(f"#include <torch/extension.h>\n{KERNEL}int host_value() {{ return undeclared_thing(; }}\n")
    _, result = builder(tmp_path / "light", stand_in).build(broken, workspace)
    _, as_written = builder(tmp_path / "plain", stand_in, light=False).build(broken, workspace)
    assert result.status is Status.COMPILE_ERROR and result.message == "Compilation failed in cuda.cu."
    assert not used_light(result) and "light/cuda.cu" not in result.diagnostics
    assert _without_cache(result.diagnostics) == _without_cache(as_written.diagnostics)
    assert "undeclared_thing" in result.diagnostics


@needs_nvcc
def test_a_light_compile_the_timeout_ends_is_not_taken_for_a_source_that_needs_the_heavy_header(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    cache = tmp_path / "cache"
    _, first = builder(cache, stand_in).build(
        request(f"#include <torch/extension.h>\n{KERNEL}"), workspace
    )  # reads the guard
    assert compiled(first) and used_light(first), first.diagnostics
    options = BuildOptions(timeout_seconds=0.001, split_sources=False, use_pch=False)
    hurried = InlineBuilder(stand_in_builder(cache, stand_in, options))
    _, result = hurried.build(request(f"#include <torch/extension.h>\n{KERNEL}"), workspace)
    assert result.status is Status.COMPILE_ERROR and "compiler killed after" in result.diagnostics
    assert used_light(result) and not heavy_markers(cache)  # no second compile; the next build tries the copy again


def _without_cache(text: str) -> str:
    return text.replace("<cache>", "")


@needs_nvcc
@pytest.mark.parametrize(
    "body",
    [
        "int host_value() { return heavy_value(); }",  # a name only the heavy header declares
        "#ifdef HEAVY_MACRO\nint host_value() { return 1; }\n#endif",  # a macro of the heavy header
    ],
)
def test_a_source_the_heavy_header_could_change_is_compiled_as_written_at_once(
    tmp_path: Path, stand_in: Path, workspace: Workspace, body: str
) -> None:
    inline = builder(tmp_path / "cache", stand_in)
    _, result = inline.build(request(f"#include <torch/extension.h>\n{KERNEL}{body}\n"), workspace)
    assert compiled(result), result.diagnostics
    assert not used_light(result) and not heavy_markers(tmp_path / "cache")  # no copy was tried


@needs_nvcc
def test_without_light_headers_a_source_compiles_as_written_and_its_object_serves_later(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    asked = request(f"#include <torch/extension.h>\n{KERNEL}")
    _, before = builder(tmp_path / "cache", stand_in, light=False).build(asked, workspace)
    assert compiled(before) and not used_light(before), before.diagnostics
    _, after = builder(tmp_path / "cache", stand_in).build(
        asked, workspace
    )  # no light copy compiled beside a cached object
    assert compiled(after) and after.objects_compiled == 0 and not used_light(after), after.message


def binding_request(cpp: str) -> dict[str, Any]:
    """A load_inline request of the C++ source ``cpp`` alone (its ``main.cpp``), which sees the stand-in headers."""
    return {**stand_in_request("", "light_ext"), "cpp_sources": [f"{cpp}\n// {uuid.uuid4().hex}\n"], "cuda_sources": []}


def used_light_binding(result: CompileResult) -> bool:
    return any("light/main.cpp" in command for command in result.commands)


@needs_nvcc
def test_a_binding_file_that_needs_only_the_light_headers_compiles_against_them_once(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    # a builder that builds precompiled headers and waits for them: without the rule, the first build would use one
    inline = InlineBuilder(
        stand_in_builder(tmp_path / "cache", stand_in, BuildOptions(split_sources=False, wait_for_pch=True))
    )
    asked = {
        **binding_request("#include <torch/extension.h>\nint f() { return bound_value() + light_value(); }"),
        "extra_include_paths": ["kernels"],
    }
    _, first = inline.build(asked, workspace)
    assert compiled(first), first.diagnostics
    assert used_light_binding(first) and first.objects_compiled == 1 and not heavy_markers(tmp_path / "cache")
    # the request names an include path: no precompiled header (it is built where the workspace's headers are not
    # visible)
    assert not any("cudagym_pch" in command for command in first.commands), first.commands
    _, again = inline.build(asked, workspace)
    assert compiled(again) and again.objects_compiled == 0 and again.objects_reused == 1, again.message


@needs_nvcc
@pytest.mark.parametrize(
    ("body", "tried"),
    [
        ("int f() { return heavy_value(); }", False),  # the guard: a name only the heavy header declares
        ("int f() { return shared_name(); }", True),  # the guard lets it by; the copy fails, the file builds
    ],
)
def test_a_binding_file_that_needs_the_heavy_header_builds_as_written(
    tmp_path: Path, stand_in: Path, workspace: Workspace, body: str, tried: bool
) -> None:
    inline = builder(tmp_path / "cache", stand_in)
    _, result = inline.build(binding_request(f"#include <torch/extension.h>\n{body}"), workspace)
    assert compiled(result), result.diagnostics
    assert not used_light_binding(result) and len(heavy_markers(tmp_path / "cache")) == int(tried)


@needs_nvcc
def test_a_broken_binding_file_shows_its_own_errors_at_its_own_lines(
    tmp_path: Path, stand_in: Path, workspace: Workspace
) -> None:
    broken = binding_request("#include <torch/extension.h>\n\nint f() { return undeclared_thing(; }")
    _, result = builder(tmp_path / "light", stand_in).build(broken, workspace)
    _, as_written = builder(tmp_path / "plain", stand_in, light=False).build(broken, workspace)
    assert result.status is Status.COMPILE_ERROR and "main.cpp:3:" in result.diagnostics, result.diagnostics
    assert _without_cache(result.diagnostics) == _without_cache(as_written.diagnostics)
    assert "light/main.cpp" not in result.diagnostics


# -- with torch's own headers ----------------------------------------------------------------------------------------

PYBIND_IN_CUDA = """#include <torch/extension.h>
__global__ void fill(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 1.0f; }
torch::Tensor ones_cuda(torch::Tensor x) {
  auto y = torch::empty_like(x);
  fill<<<(x.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), x.numel());
  return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("ones_cuda", &ones_cuda); }
"""


TYPICAL_CUDA = """#include <torch/extension.h>
#include <cuda_runtime.h>
#define CHECK_INPUT(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, float scale_factor, int n) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  if (idx < n) { acc = x[idx] * scale_factor; y[idx] = acc; }
}
torch::Tensor scale_cuda(torch::Tensor x, float scale_factor) {
  CHECK_INPUT(x);
  auto y = torch::empty_like(x);
  const int threads = 256, blocks = (x.numel() + threads - 1) / threads;
  scale_kernel<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), scale_factor, x.numel());
  return y;
}
"""


def torch_builder(cache: Path) -> InlineBuilder:
    """A builder on torch's own headers (the real toolchain) that never splits a file."""
    return InlineBuilder(Builder(NVCC_ONLY, cache_dir=cache, options=BuildOptions(split_sources=False)))


def light_plan(inline: InlineBuilder, cuda: str, workspace: Workspace) -> bool:
    """Whether the builder would compile ``cuda`` (with torch's implicit headers) against the light header."""
    sources = inline_sources({**request(cuda), "no_implicit_headers": False})
    folder = inline._write_sources(sources)
    view = WorkspaceHeaders.take(workspace, inline.builder.cache_dir)
    unit = inline._unit(folder / "cuda.cu", folder, view, sources, [])
    return inline._light_way(unit, view) is not None


@needs_nvcc
def test_with_torch_own_headers_a_typical_source_gets_the_light_header_and_one_with_pybind_does_not(
    tmp_path: Path, workspace: Workspace
) -> None:
    # the guard read from torch's real headers (one preprocessor run); no compile
    inline = torch_builder(tmp_path / "cache")
    assert light_plan(inline, TYPICAL_CUDA, workspace)
    assert not light_plan(inline, PYBIND_IN_CUDA, workspace)  # PYBIND11_MODULE: a macro of torch/extension.h
    nn = TYPICAL_CUDA.replace("return y;", "return torch::nn::functional::relu(y);")
    assert not light_plan(inline, nn, workspace)  # torch::nn: only torch/extension.h declares it


def binding_plan(inline: InlineBuilder, cpp: str, workspace: Workspace) -> bool:
    """Whether the builder would compile ``main.cpp`` of a request with ``cpp`` and torch's implicit headers (a
    pybind11 module of ``f``) against the binding headers."""
    asked = {**binding_request(cpp), "no_implicit_headers": False, "functions": [["f", ""]]}
    sources = inline_sources(asked)
    folder = inline._write_sources(sources)
    view = WorkspaceHeaders.take(workspace, inline.builder.cache_dir)
    unit = inline._unit(folder / "main.cpp", folder, view, sources, [])
    return inline._light_way(unit, view) is not None


def host_plan(inline: InlineBuilder, cuda: str, workspace: Workspace) -> bool:
    """Whether the builder would compile the host unit of ``cuda``, split, against the light header."""
    sources = inline_sources({**request(cuda), "no_implicit_headers": False})
    folder = inline._write_sources(sources)
    view = WorkspaceHeaders.take(workspace, inline.builder.cache_dir)
    unit = inline._unit(folder / "cuda.cu", folder, view, sources, [])
    _, command = inline._host_command(unit, sources, [])
    host = kernel_split.split(unit.source.read_text(), "t").host
    lightened = inline._lighter_host(host, command, view)
    return lightened != host and "#include <torch/types.h>" in lightened


@needs_nvcc
def test_with_torch_own_headers_a_typical_binding_and_host_unit_get_the_light_headers_and_frontend_code_does_not(
    tmp_path: Path, workspace: Workspace
) -> None:
    # the guards read from torch's real headers with the C++ compiler's flags (preprocessor runs); no compile
    inline = torch_builder(tmp_path / "cache")
    declaration = "torch::Tensor f(torch::Tensor x, double s, c10::optional<torch::Tensor> b, std::vector<int64_t> v);"
    assert binding_plan(inline, declaration, workspace)
    assert not binding_plan(inline, "torch::Tensor f(torch::nn::Linear layer);", workspace)
    assert host_plan(inline, TYPICAL_CUDA, workspace)
    nn = TYPICAL_CUDA.replace("return y;", "return torch::nn::functional::relu(y);")
    assert not host_plan(inline, nn, workspace)
    assert not host_plan(inline, TYPICAL_CUDA.replace("return y;", "py::print(1); return y;"), workspace)
