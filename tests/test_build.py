"""The builder compiles only what changed: objects and whole builds are cached by content, not by path,
headers of the workspace invalidate what includes them, and the link uses the fastest linker there is."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym import build
from cudagym.backends import find_toolchain, resolve_backend
from cudagym.baselines.scripted import solution_files
from cudagym.build import FAST_LINKERS, LINKER_ENV, Builder, fast_linker
from cudagym.results import Status
from cudagym.tasks import load
from cudagym.workspace import Workspace

RELU = load("builtin").get("builtin/relu")
KERNEL = "kernels/relu.cpp"


def relu_workspace(root: Path) -> Workspace:
    workspace = Workspace(RELU.source_for("cpu"), "build test", root_dir=root)
    for path, content in solution_files(RELU, "cpu").items():
        workspace.write(path, content)
    return workspace


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Builder:
    return Builder(resolve_backend("cpu"), cache_dir=cache_dir)


def test_only_the_edited_kernel_is_compiled_again_and_an_unchanged_build_is_reused(
    builder: Builder, tmp_path: Path
) -> None:
    workspace = relu_workspace(tmp_path)
    first = builder.build(workspace)
    assert first.status is Status.OK, first.diagnostics
    units = first.objects_compiled + first.objects_reused
    assert units == 3  # the template's binding.cpp, the kernel, its binding file

    again = builder.build(workspace)
    assert again.cached and again.artifact == first.artifact

    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + f"\n// edited in {tmp_path.name}\n")
    edited = builder.build(workspace)
    assert edited.status is Status.OK and not edited.cached
    assert (edited.objects_compiled, edited.objects_reused) == (1, units - 1)
    assert edited.artifact != first.artifact


def test_the_same_files_in_another_workspace_reuse_the_build(builder: Builder, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = builder.build(relu_workspace(tmp_path / "a"))
    second = builder.build(relu_workspace(tmp_path / "b"))
    assert first.status is Status.OK and second.cached and second.artifact == first.artifact


def test_a_workspace_header_invalidates_the_objects(builder: Builder, tmp_path: Path) -> None:
    workspace = relu_workspace(tmp_path)
    assert builder.build(workspace).status is Status.OK
    workspace.write("kernels/tuning.h", f"#define CUDAGYM_TEST_TUNING {len(str(tmp_path))}\n")
    rebuilt = builder.build(workspace)
    assert rebuilt.status is Status.OK and rebuilt.objects_reused == 0 and rebuilt.objects_compiled == 3


def test_a_compile_error_names_the_file_and_keeps_no_object(builder: Builder, tmp_path: Path) -> None:
    workspace = relu_workspace(tmp_path)
    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + "\nint broken( {\n")
    result = builder.build(workspace)
    assert result.status is Status.COMPILE_ERROR and "relu.cpp" in result.message
    assert "error" in result.diagnostics and not result.artifact


def test_the_link_uses_a_faster_linker_when_the_compiler_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    cxx = find_toolchain().cxx
    chosen = fast_linker(cxx)
    assert chosen == () or (len(chosen) == 1 and chosen[0] in FAST_LINKERS)
    monkeypatch.setenv(LINKER_ENV, "default")
    assert fast_linker(cxx) == ()
    monkeypatch.delenv(LINKER_ENV)
    assert fast_linker(cxx) == chosen


def test_a_fast_linker_that_fails_a_real_link_gives_way_to_the_default_one(
    builder: Builder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As gold on the H200 machine: it linked the probe but not the extension (it could not find the
    compiler's libstdc++). The build still succeeds, and later links skip that linker."""
    cxx = find_toolchain().cxx
    monkeypatch.setattr(build, "_probe_fast_linker", lambda _cxx: ("-Wl,--cudagym-no-such-option",))
    monkeypatch.setattr(build, "_FAST_LINKER_FAILED", set())
    assert fast_linker(cxx) == ("-Wl,--cudagym-no-such-option",)
    result = builder.build(relu_workspace(tmp_path))
    assert result.status is Status.OK, result.diagnostics
    assert fast_linker(cxx) == ()


def _ccache_stats(cache_dir: Path) -> dict[str, int]:
    import os
    import subprocess

    env = dict(os.environ, CCACHE_DIR=str(cache_dir / "ccache"))
    out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in out.splitlines() if "\t" in line)}


def test_compiles_go_through_ccache_which_serves_an_edit_the_object_cache_cannot(
    builder: Builder, tmp_path: Path
) -> None:
    if build.ccache_path() is None:
        pytest.skip("ccache is not installed on this machine (.ci/run installs it)")
    workspace = relu_workspace(tmp_path)
    source = (workspace.path / KERNEL).read_text() + f"\nstatic const int cudagym_test_{tmp_path.name} = 1;\n"
    workspace.write(KERNEL, source)  # new to both caches
    assert builder.build(workspace).status is Status.OK
    before = _ccache_stats(builder.cache_dir)
    workspace.write(KERNEL, source + "// only a comment: the object cache misses, ccache does not\n")
    edited = builder.build(workspace)
    assert edited.status is Status.OK and edited.objects_compiled == 1
    after = _ccache_stats(builder.cache_dir)
    hits = ("direct_cache_hit", "preprocessed_cache_hit")
    assert sum(after.get(k, 0) for k in hits) == sum(before.get(k, 0) for k in hits) + 1


def test_without_ccache_the_compiler_runs_itself(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real = build._run

    def recording(cmd: list[str], *args: object, **kwargs: object) -> tuple[int, str]:
        calls.append(list(cmd))
        return real(cmd, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "_run", recording)
    monkeypatch.setattr(build, "ccache_path", lambda: "/nonexistent/ccache")
    off = Builder(resolve_backend("cpu"), cache_dir=cache_dir, options=build.BuildOptions(ccache=False))
    workspace = relu_workspace(tmp_path)
    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + f"\nstatic const int t_{tmp_path.name} = 1;\n")
    assert off.build(workspace).status is Status.OK  # BuildOptions(ccache=False): the path above is never used
    compiles = [c for c in calls if "-c" in c]
    assert compiles and all(c[0] != "/nonexistent/ccache" for c in compiles)
