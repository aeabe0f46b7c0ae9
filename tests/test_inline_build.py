"""KernelBench-format solutions (``load_inline`` in a single-file ``model_new.py``) are built by the trusted builder:
an identical request is a cache hit, an edit recompiles only what changed, a request cannot steer the compiler's
output, and what a solution's ``load_inline`` gets depends only on its own sources and flags (a candidate that
plants a fake extension where a later solution's would be found achieves nothing).

The builder-level tests use torch-free sources (``no_implicit_headers``), which compile in a fraction of a second,
without the precompiled ``torch/extension.h`` (they never include it: its background build would only take the
machine's cores from the other tests). The env-level ones compile ``torch/extension.h`` like KernelBench solutions
do, once per solution, against the precompiled header, which the first of them waits for (building it once instead of
compiling the whole header for the solutions that come before it is ready)."""

from __future__ import annotations

import ctypes
import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cudagym_testing import RELU, RewritingBuilder, relu_solution, write_all

from cudagym.backends import resolve_backend
from cudagym.baselines import tool_call
from cudagym.build import Builder, BuildOptions
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig, LocalEvaluator
from cudagym.harness.inline_request import request_key
from cudagym.inline_build import InlineBuilder
from cudagym.integrity.policy import IntegrityPolicy
from cudagym.results import CompileResult, Status
from cudagym.sandbox import isolation_status
from cudagym.tasks import load
from cudagym.workspace import Workspace

SANDBOXED = isolation_status().works("user")  # the compiler sandbox needs a user namespace (and mounts in it)


def unique() -> str:
    """A token no earlier run wrote: sources made of it are new to any cache."""
    return "u" + uuid.uuid4().hex[:12]


def plain_request(body: str, **changes: Any) -> dict[str, Any]:
    """A load_inline request with torch-free C++ (what the candidate's loader sends)."""
    request = {
        "loader": "load_inline",
        "name": "plain_ext",
        "cpp_sources": [body],
        "cuda_sources": [],
        "functions": None,
        "with_pytorch_error_handling": True,
        "no_implicit_headers": True,
        "extra_cflags": ["-O2"],
        "extra_cuda_cflags": [],
        "extra_ldflags": [],
        "extra_include_paths": [],
        "with_cuda": False,
    }
    return {**request, **changes}


@pytest.fixture(scope="module")
def inline_builder(cache_dir: Path) -> InlineBuilder:
    """A cpu builder for torch-free requests: no precompiled ``torch/extension.h``, which their sources never use."""
    return InlineBuilder(Builder(resolve_backend("cpu"), cache_dir=cache_dir, options=BuildOptions(use_pch=False)))


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace(load("builtin").get(RELU).source_for("cpu"), "inline build test", root_dir=tmp_path)


def test_an_identical_request_is_a_cache_hit_and_an_edit_recompiles_only_what_changed(
    inline_builder: InlineBuilder, workspace: Workspace
) -> None:
    token = unique()
    first_file, second_file = f"int first_{token}() {{ return 1; }}\n", f"int second_{token}() {{ return 2; }}\n"
    request = plain_request("", loader="load", sources=[["a.cpp", first_file], ["b.cpp", second_file]])
    del request["cpp_sources"], request["cuda_sources"], request["functions"]
    key, built = inline_builder.build(request, workspace)
    assert built.status is Status.OK, built.diagnostics
    assert (built.objects_compiled, built.cached) == (2, False)
    again_key, again = inline_builder.build(dict(request), workspace)
    assert again.cached and again.objects_compiled == 0 and again.artifact == built.artifact and again_key == key
    edited = {**request, "sources": [["a.cpp", first_file], ["b.cpp", second_file.replace("2;", "3;")]]}
    edited_key, rebuilt = inline_builder.build(edited, workspace)
    assert rebuilt.status is Status.OK, rebuilt.diagnostics
    assert (rebuilt.objects_compiled, rebuilt.objects_reused) == (1, 1)
    assert edited_key != key and rebuilt.artifact != built.artifact
    assert Path(str(rebuilt.artifact)).name == "plain_ext.so"
    assert request_key(edited) == edited_key  # what the candidate's loader looks its library up by


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"extra_cflags": ["-o /tmp/elsewhere.o"]}, "'-o'"),
        ({"extra_ldflags": ["-B/tmp/tools"]}, "'-B/tmp/tools'"),
        ({"extra_cflags": ["-Xcompiler=-fplugin=/tmp/p.so"]}, "'-Xcompiler=-fplugin=/tmp/p.so'"),
        ({"extra_ldflags": ["-Wl,-o,/tmp/elsewhere.so"]}, "'-Wl,-o,/tmp/elsewhere.so'"),
        ({"extra_include_paths": ["../.."]}, "outside the workspace"),
        ({"name": "../escape"}, "not a valid module name"),
        ({"cuda_sources": ["__global__ void k() {}"]}, "need the cuda backend"),
        # a lone surrogate, as the request's JSON can carry it: the agent's error, not an exception of the builder
        ({"cpp_sources": ["int g() { return 0; }  // \udc80"]}, "not valid UTF-8"),
        ({"extra_cflags": ["-DX=\udc80"]}, "not valid UTF-8"),
    ],
)
def test_a_request_cannot_steer_the_build_elsewhere(
    inline_builder: InlineBuilder, workspace: Workspace, changes: dict[str, Any], said: str
) -> None:
    _, result = inline_builder.build(plain_request(f"int f_{unique()}() {{ return 0; }}\n", **changes), workspace)
    assert result.status is Status.COMPILE_ERROR and said in result.message, result.message
    assert not result.artifact


def test_a_source_with_text_beyond_ascii_builds(inline_builder: InlineBuilder, workspace: Workspace) -> None:
    """What the UTF-8 check above must let through: comments and strings in any script."""
    body = f'// café, ✓, 核\nconst char* g_{unique()}() {{ return "π ≈ 3.14"; }}\n'
    _, result = inline_builder.build(plain_request(body), workspace)
    assert result.status is Status.OK, result.diagnostics


def value_request(token: str, include: str = '"value.h"', **changes: Any) -> dict[str, Any]:
    """A request whose library's ``value_<token>()`` returns ``VALUE`` of the workspace's ``kernels/value.h``."""
    body = f'#include {include}\nextern "C" int value_{token}() {{ return VALUE; }}\n'
    return plain_request(body, **{"extra_include_paths": ["kernels"], **changes})


def library_value(result: CompileResult, token: str) -> int:
    assert result.status is Status.OK, result.diagnostics
    return int(getattr(ctypes.CDLL(str(result.artifact)), f"value_{token}")())


def test_a_request_includes_the_workspace_headers_through_its_include_paths(
    inline_builder: InlineBuilder, workspace: Workspace
) -> None:
    token = unique()
    workspace.write("kernels/value.h", "#define VALUE 1\n")
    assert library_value(inline_builder.build(value_request(token), workspace)[1], token) == 1
    workspace.write("kernels/value.h", "#define VALUE 2\n")  # a header edit is a new key
    assert library_value(inline_builder.build(value_request(token), workspace)[1], token) == 2
    # the include path as the candidate's model_new.py often spells it: absolute, from its own folder
    absolute = value_request(token, extra_include_paths=[str(workspace.path / "kernels")])
    assert library_value(inline_builder.build(absolute, workspace)[1], token) == 2
    workspace.write("kernels/value.h", "#define VALUE 2\nint broken( {\n")  # an error in it names it as the agent does
    _, broken = inline_builder.build(value_request(token), workspace)
    assert broken.status is Status.COMPILE_ERROR and "\nkernels/value.h:2:" in broken.diagnostics, broken.diagnostics


def test_a_header_changed_during_its_build_does_not_reach_the_cache(
    cache_dir: Path, workspace: Workspace, tmp_path: Path
) -> None:
    builder = RewritingBuilder(resolve_backend("cpu"), cache_dir=cache_dir, options=BuildOptions(use_pch=False))
    token = unique()
    workspace.write("kernels/value.h", "#define VALUE 1\n")
    builder.rewrite = (workspace, "kernels/value.h", "#define VALUE 2\n")
    stale = InlineBuilder(builder).build(value_request(token), workspace)[1]
    assert library_value(stale, token) == 1  # built from the header its key was made of
    (tmp_path / "other").mkdir()
    other = Workspace(load("builtin").get(RELU).source_for("cpu"), "another episode", root_dir=tmp_path / "other")
    other.write("kernels/value.h", "#define VALUE 1\n")  # the same header elsewhere: served that object
    again = InlineBuilder(Builder(resolve_backend("cpu"), cache_dir=cache_dir)).build(value_request(token), other)[1]
    assert again.cached and library_value(again, token) == 1


POLYGLOT = '#if 0\n"""\n#endif\n#define VALUE 7\n#if 0\n"""\n#endif\n'  # C++ and Python both read it


@pytest.mark.parametrize(
    ("include", "paths"),
    [
        ('"model_new.py"', ["."]),
        ('"kernels/other.cpp"', ["."]),
        ('"../model_new.py"', ["kernels"]),
        pytest.param(
            "ABSOLUTE",
            [],
            marks=pytest.mark.skipif(not SANDBOXED, reason=f"no user namespaces here: {isolation_status().user}"),
        ),
    ],
    ids=["the agent's python file", "a workspace source", "up from an include path", "by absolute path"],
)
def test_a_request_cannot_include_a_workspace_file_its_key_does_not_cover(
    inline_builder: InlineBuilder, workspace: Workspace, include: str, paths: list[str]
) -> None:
    # a request's objects are keyed by its sources, flags and the workspace's headers: one that read model_new.py
    # or a kernel source would keep its object (and its static checks' verdict) when that file changed
    workspace.write("model_new.py", POLYGLOT)
    workspace.write("kernels/other.cpp", POLYGLOT)
    if include == "ABSOLUTE":
        include = f'"{workspace.path.resolve() / "model_new.py"}"'
    token = unique()
    request = value_request(token, include, extra_include_paths=paths)
    _, result = inline_builder.build(request, workspace)
    assert result.status is Status.COMPILE_ERROR and "No such file or directory" in result.diagnostics
    assert "workspace-headers" not in result.diagnostics, result.diagnostics  # the copy is not the agent's concern
    hidden = request["cpp_sources"][0].replace(
        f"#include {include}", f"#if 0\n#include {include}\n#endif\n#define VALUE 3"
    )
    assert library_value(inline_builder.build({**request, "cpp_sources": [hidden]}, workspace)[1], token) == 3


# -- env level: a KernelBench-format solution ------------------------------------------------------------------------

SINGLE_FILE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor relu_forward(torch::Tensor x) {{
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = {expression};
  return y;
}}
// {token}
"""
relu_ext = load_inline(name="{name}", cpp_sources=cpp_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext.relu_forward(x)
'''
HONEST = "in[i] > 0.f ? in[i] : 0.f"

# The attacker: builds a library under the victim's module name that returns zeros, then plants it (with the victim's
# sources beside it) wherever a later load_inline of that name was looked up before: the torch extensions folders
# (cudagym's shared one among them) and the trusted cache it can reach from its own library's path.
PLANTING = """
import os, pathlib, shutil, sys
built = pathlib.Path(relu_ext.__file__)
cache = built.parents[2]
targets = [cache / "torch_extensions", pathlib.Path.home() / ".cache" / "torch_extensions"]
if os.environ.get("TORCH_EXTENSIONS_DIR"):
    targets.append(pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"]))
targets += [cache / "builds" / "planted", cache / "inline" / "planted"]
for root in targets:
    try:
        folder = root / {name!r}
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(built, folder / ({name!r} + ".so"))
        (folder / "main.cpp").write_text({victim!r})
        print("planted", folder)
    except OSError as exc:
        print("refused", root, exc)
sys.stdout.flush()
"""


@pytest.fixture(scope="module")
def env(fast_config: EvalConfig) -> Iterator[CudaKernelEnv]:
    """One cpu env for the module; no static checks, so that the planting candidate gets as far as it can. Its
    compiles wait for the precompiled header (the default compiles without it while it is built in the background:
    here that would compile all of ``torch/extension.h`` for the first two solutions, beside the header's build).
    The import's limit is long: the first solution's holds the header's build, which other test workers' compilers
    can slow past the default 300 s on a 2-core machine."""
    build = dataclasses.replace(fast_config.build, wait_for_pch=True, timeout_seconds=900.0)
    config = dataclasses.replace(fast_config, policy=IntegrityPolicy.without_static_checks(), build=build)
    environment = CudaKernelEnv(backend="cpu", eval_config=config)
    yield environment
    environment.close()


def compile_source(env: CudaKernelEnv, source: str) -> tuple[str, dict[str, Any]]:
    env.reset(options={"task_id": RELU})
    assert env.step(tool_call("write_file", path="model_new.py", content=source))[4]["status"] == "ok"
    obs, _, _, _, info = env.step(tool_call("compile"))
    return obs, info


def test_a_load_inline_solution_is_built_by_the_trusted_builder_and_served_from_its_cache(
    env: CudaKernelEnv, fast_config: EvalConfig
) -> None:
    source = SINGLE_FILE.format(name="honest_relu", expression=HONEST, token=unique())
    obs, info = compile_source(env, source)
    assert info["status"] == "ok", obs
    result = info["result"]
    assert result["objects_compiled"] == 1 and not result["cached"] and "honest_relu" in result["message"], obs
    # its main.cpp is a declaration and its bindings: compiled against the binding headers, not all of torch's
    assert any("light/main.cpp" in command for command in result["commands"]), result["commands"]
    obs, _, _, _, verified = env.step(tool_call("verify"))
    assert verified["status"] == "ok", obs  # the module imports and its bindings convert
    # another evaluator (a new env process, say) imports the solution again: the build is a cache hit
    assert isinstance(env.evaluator, LocalEvaluator)
    other = LocalEvaluator(env.evaluator.task, env.evaluator.backend, fast_config, cache_dir=env.evaluator.cache_dir)
    try:
        again = other.compile(env.workspace)
    finally:
        other.close()
    assert again.status is Status.OK and again.cached and again.objects_compiled == 0, again.message


def test_a_planted_extension_has_no_effect_on_a_later_solution(env: CudaKernelEnv) -> None:
    name = f"victim_{unique()}"
    victim = SINGLE_FILE.format(name=name, expression=HONEST, token=unique())
    zeros = SINGLE_FILE.format(name=name, expression="0.f", token=unique())
    attacker = zeros + PLANTING.format(name=name, victim=victim)
    obs, info = compile_source(env, attacker)
    assert info["status"] == "ok", obs
    report = [line for line in info["result"]["diagnostics"].splitlines() if line.startswith(("planted", "refused"))]
    assert any(line.startswith("planted") for line in report), report  # its own folders at least
    if isolation_status().works("readonly"):  # the trusted cache is out of a candidate's reach
        trusted = [line for line in report if "/builds/" in line or "/inline/" in line]
        assert trusted and all(line.startswith("refused") for line in trusted), report
    obs, info = compile_source(env, victim)
    assert info["status"] == "ok", obs
    obs, _, _, _, verified = env.step(tool_call("verify"))
    assert verified["status"] == "ok", obs  # its own kernel ran, not the attacker's zeros


def test_load_inline_in_a_workspace_layout_solution_says_where_kernels_go(env: CudaKernelEnv) -> None:
    # the kernel files build cuda_extension; a load_inline beside them is not served, and the agent is told why
    files = relu_solution()
    files["model_new.py"] = (
        "from torch.utils.cpp_extension import load_inline\n"
        'extra = load_inline(name="extra", cpp_sources="int f() { return 1; }", functions=["f"])\n'
        + files["model_new.py"]
    )
    env.reset(options={"task_id": RELU})
    write_all(env, files)
    obs, _, _, _, info = env.step(tool_call("verify"))
    assert info["status"] != "ok", obs
    assert "served for single-file solutions" in obs and "kernel files" in obs, obs
