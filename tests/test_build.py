"""The builder compiles only what changed: objects and whole builds are cached by content, not by path,
headers of the workspace invalidate what includes them, and the link uses the fastest linker there is. Its
compilers run in the compiler sandbox where the machine allows it: a kernel cannot make them read a file outside
their view, and honest builds (precompiled header, ccache) work there as before."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from cudagym_testing import RewritingBuilder

from cudagym import build, compiler_jail
from cudagym.backends import find_toolchain, resolve_backend
from cudagym.baselines.scripted import solution_files
from cudagym.build import FAST_LINKERS, LINKER_ENV, Builder, BuildOptions, fast_linker
from cudagym.results import CompileResult, Status
from cudagym.sandbox import isolation_status
from cudagym.tasks import load
from cudagym.workspace import Workspace

RELU = load("builtin").get("builtin/relu")
KERNEL = "kernels/relu.cpp"


def unique() -> str:
    """A token no earlier run wrote: edits made of it are new to any cache, a reused one included."""
    return "u" + uuid.uuid4().hex[:12]


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

    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + f"\n// edited in {unique()}\n")
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
    workspace.write("kernels/tuning.h", f"#define CUDAGYM_TEST_TUNING_{unique()} 1\n")
    rebuilt = builder.build(workspace)
    assert rebuilt.status is Status.OK and rebuilt.objects_reused == 0 and rebuilt.objects_compiled == 3


def marked_kernel(marker: str) -> str:
    """The ReLU kernel with a function named ``marker`` (to find in the object it is built into)."""
    return (Path(RELU.solutions["cpu"]) / KERNEL).read_text() + f'\nextern "C" int {marker}() {{ return 7; }}\n'


def test_a_workspace_changed_during_its_build_does_not_reach_the_cache(cache_dir: Path, tmp_path: Path) -> None:
    builder = RewritingBuilder(resolve_backend("cpu"), cache_dir=cache_dir)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = f"cudagym_first_{unique()}", f"cudagym_second_{unique()}"
    workspace = relu_workspace(tmp_path / "a")
    workspace.write(KERNEL, marked_kernel(first))
    builder.rewrite = (workspace, KERNEL, marked_kernel(second))
    stale = builder.build(workspace)
    assert stale.status is Status.OK and stale.objects_compiled >= 1, stale.diagnostics  # the marked kernel, at least
    built = Path(stale.artifact).read_bytes()
    assert first.encode() in built and second.encode() not in built  # built from the files its key was made of

    honest = relu_workspace(tmp_path / "b")  # the first text again, in another episode: served from the cache
    honest.write(KERNEL, marked_kernel(first))
    again = Builder(resolve_backend("cpu"), cache_dir=cache_dir).build(honest)
    assert again.cached and again.artifact == stale.artifact


@pytest.mark.parametrize(
    "included", ["model_new.py", "relu_binding.cpp"], ids=["the agent's python file", "another kernel source"]
)
def test_a_kernel_cannot_include_a_workspace_file_its_key_does_not_cover(
    builder: Builder, tmp_path: Path, included: str
) -> None:
    # an object is cached under its own text and the workspace's headers: a source that read model_new.py (a file
    # C++ and Python can both read) or another source would keep its object when that file changed
    workspace = relu_workspace(tmp_path)
    original = (workspace.path / KERNEL).read_text()
    workspace.write(KERNEL, f'#if 0\n#include "{included}"\n#endif\n{original}// {unique()}\n')
    assert builder.build(workspace).status is Status.OK  # not read: nothing to find
    workspace.write(KERNEL, f'#include "{included}"\n{original}// {unique()}\n')
    result = builder.build(workspace)
    assert result.status is Status.COMPILE_ERROR and not_found(result), result.diagnostics
    assert f"kernels/relu.cpp:1:10: fatal error: {included}: No such file or directory" in result.diagnostics
    assert "cudagym-build-" not in result.diagnostics and "cudagym-build-" not in " ".join(result.commands)
    workspace.write("kernels/shared.h", f"// included: a header the key covers {unique()}\n")
    workspace.write(KERNEL, f'#include "shared.h"\n{original}')
    assert builder.build(workspace).status is Status.OK


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


def _ccache_stats(ccache_dir: Path) -> dict[str, int]:
    import os
    import subprocess

    env = dict(os.environ, CCACHE_DIR=str(ccache_dir))
    out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split("\t") for line in out.splitlines() if "\t" in line)}


def test_compiles_go_through_ccache_which_serves_an_edit_the_object_cache_cannot(
    builder: Builder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if build.ccache_path() is None:
        pytest.skip("ccache is not installed on this machine (.ci/run installs it)")
    ccache_dir = tmp_path / "ccache"  # a ccache of its own: other tests' compiles meanwhile do not count
    monkeypatch.setenv("CCACHE_DIR", str(ccache_dir))
    (tmp_path / "ws").mkdir()
    workspace = relu_workspace(tmp_path / "ws")
    source = (workspace.path / KERNEL).read_text() + f"\nstatic const int cudagym_test_{unique()} = 1;\n"
    workspace.write(KERNEL, source)  # new to both caches
    assert builder.build(workspace).status is Status.OK
    before = _ccache_stats(ccache_dir)
    workspace.write(KERNEL, source + "// only a comment: the object cache misses, ccache does not\n")
    assert builder.isolation.sandboxed == SANDBOXED  # ccache serves compiles inside the sandbox too
    edited = builder.build(workspace)
    assert edited.status is Status.OK and edited.objects_compiled == 1
    after = _ccache_stats(ccache_dir)
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
    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + f"\nstatic const int t_{unique()} = 1;\n")
    assert off.build(workspace).status is Status.OK  # BuildOptions(ccache=False): the path above is never used
    compiles = [c for c in calls if "-c" in c]
    assert compiles and all(c[0] != "/nonexistent/ccache" for c in compiles)


# -- the compiler sandbox -----------------------------------------------------------------------------------------

SANDBOXED = isolation_status().works("user")  # the compiler sandbox needs a user namespace (and mounts in it)


def attempts(secret: Path, solution: Path, other_workspace: Path, objects: Path) -> dict[str, str]:
    """Lines that make a kernel of ``workspace`` read a file outside the compiler's view, by what they try."""
    hostname = "/etc/hostname"
    return {
        "include a reference solution": f'#include "{solution}"\n',
        "include /etc/hostname": f'static const char host[] = {{\n#include "{hostname}"\n}};\n',
        "include a file beside the workspace": f'#include "{secret}"\n',
        # up to the root from any folder the compile runs in (it sees a copy of the workspace's files), then down
        "include it by a relative path": f'#include "{"../" * 32}{str(secret).lstrip("/")}"\n',
        "include another workspace's kernel": f'#include "{other_workspace / KERNEL}"\n',
        "incbin a reference solution": f'asm(".incbin \\"{solution}\\"");\n',
        "incbin a file beside the workspace": f'asm(".incbin \\"{secret}\\"");\n',
        "incbin the cache's objects": f'asm(".incbin \\"{objects}\\"");\n',
        "include the environment of process 1": '#include "/proc/1/environ"\n',
    }


def not_found(result: CompileResult) -> bool:
    """Whether a build failed because the compiler or the assembler could not find a file."""
    return "No such file or directory" in result.diagnostics or "file not found" in result.diagnostics


def test_the_compiler_sandbox_is_what_the_machine_allows(builder: Builder) -> None:
    isolation = builder.isolation
    assert isolation.sandboxed == SANDBOXED, isolation.summary()
    if isolation.sandboxed:
        assert isolation.notes == () and "/usr" in isolation.view
        assert any(Path(p).name == "tasks" for p in isolation.hidden)  # cudagym's task set, where it is visible
    else:
        assert isolation.notes  # why not


@pytest.mark.skipif(not SANDBOXED, reason=f"no user namespaces here: {isolation_status().user}")
def test_a_kernel_cannot_make_the_compiler_read_files_outside_its_view(builder: Builder, tmp_path: Path) -> None:
    """Called on the builder directly: no static check stands in front of the sandbox here."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    other = relu_workspace(tmp_path / "a")  # another episode's workspace, and its objects in the cache
    assert builder.build(other).status is Status.OK
    objects = next(builder.objects_dir.glob("*.o"))
    secret = tmp_path / "secret.h"
    secret.write_text("int cudagym_leaked_secret = 42;\n")
    solution = next(Path(RELU.solutions["cpu"]).rglob("*.cpp"))
    workspace = relu_workspace(tmp_path / "b")
    original = (workspace.path / KERNEL).read_text()
    unsandboxed = Builder(resolve_backend("cpu"), cache_dir=builder.cache_dir, options=BuildOptions(sandbox=False))
    for name, line in attempts(secret, solution, other.path, objects).items():
        workspace.write(KERNEL, line + original + f"\n// {name} {unique()}\n")
        result = builder.build(workspace)
        assert result.status is Status.COMPILE_ERROR and not_found(result), f"{name}: {result.diagnostics}"
        if "hostname" not in line or os.path.exists("/etc/hostname"):  # outside the sandbox the file is read
            assert not not_found(unsandboxed.build(workspace)), name


@pytest.mark.skipif(not SANDBOXED, reason=f"no user namespaces here: {isolation_status().user}")
def test_inside_the_compiler_sandbox_only_its_view_is_there(builder: Builder, tmp_path: Path) -> None:
    """A program run where the compiler runs: what it can open, write and connect to."""
    probe = tmp_path / "probe"
    source = tmp_path / "probe.cpp"
    source.write_text(
        "#include <arpa/inet.h>\n#include <cerrno>\n#include <cstdio>\n#include <cstring>\n#include <fcntl.h>\n"
        "#include <netinet/in.h>\n#include <sys/socket.h>\n#include <unistd.h>\n"
        "int main(int argc, char** argv) {\n"
        "  for (int i = 2; i < argc; ++i) {\n"
        "    int fd = open(argv[i], O_RDONLY);\n"
        '    std::printf("read %s: %s\\n", argv[i], fd < 0 ? std::strerror(errno) : "ok");\n'
        "  }\n"
        "  int fd = open(argv[1], O_WRONLY | O_CREAT, 0644);\n"
        '  std::printf("write %s: %s\\n", argv[1], fd < 0 ? std::strerror(errno) : "ok");\n'
        "  int s = socket(AF_INET, SOCK_STREAM, 0);\n"
        "  sockaddr_in a{};\n  a.sin_family = AF_INET;\n  a.sin_port = htons(53);\n"
        '  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);\n'
        "  int rc = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a);\n"
        '  std::printf("connect: %s\\n", rc == 0 ? "ok" : std::strerror(errno));\n'
        "}\n"
    )
    assert subprocess.run([find_toolchain().cxx, str(source), "-o", str(probe)], capture_output=True).returncode == 0
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    solution = next(Path(RELU.solutions["cpu"]).rglob("*.cpp"))
    hidden = [str(solution), "/etc/hostname", str(builder.objects_dir), str(tmp_path / "probe.cpp")]
    hidden += [str(p) for p in Path.home().iterdir() if p.is_file()][:3]  # the home folder's own files
    shown = [str(probe), find_toolchain().torch_includes[0], "/usr/include/stdio.h", "/dev/null"]
    prefix = builder.sandbox.prefix(cwd=scratch, readonly=[probe], writable=[scratch])
    done = subprocess.run(
        [*prefix, str(probe), "/usr/cudagym-written", *hidden, *shown], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for path in hidden:
        assert f"read {path}: No such file or directory" in done.stdout, done.stdout
    for path in shown:
        assert f"read {path}: ok" in done.stdout, done.stdout
    assert "write /usr/cudagym-written: Read-only file system" in done.stdout
    assert "connect: Network is unreachable" in done.stdout


@pytest.mark.skipif(not SANDBOXED, reason=f"no user namespaces here: {isolation_status().user}")
def test_sandboxed_builds_use_the_precompiled_header_and_the_launcher_is_cheap(
    builder: Builder, tmp_path: Path
) -> None:
    waiting = Builder(resolve_backend("cpu"), cache_dir=builder.cache_dir, options=BuildOptions(wait_for_pch=True))
    workspace = relu_workspace(tmp_path)
    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + f"\nstatic const int pch_{unique()} = 1;\n")
    binding = (workspace.path / "kernels/relu_binding.cpp").read_text()
    workspace.write("kernels/relu_binding.cpp", binding + f"\n// {unique()}\n")
    result = waiting.build(workspace)
    assert result.status is Status.OK, result.diagnostics
    assert any("cudagym_pch.h" in c for c in result.commands) and "pch" not in result.diagnostics.lower()
    prefix = builder.sandbox.prefix(cwd=tmp_path, writable=[tmp_path])
    seconds = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([*prefix, "/bin/true"], check=True)
        seconds.append(time.perf_counter() - start)
    assert sorted(seconds)[2] < 0.25  # a few milliseconds here: far below a compile's 0.2-0.4 s


def test_without_a_sandbox_the_compiler_runs_as_before_and_says_why(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the launcher cannot enter its namespaces (as in containers that forbid user namespaces)."""
    failing = tmp_path / "launcher"
    failing.write_text(
        f"#!/bin/sh\necho '{compiler_jail.MESSAGE} unshare CLONE_NEWUSER: Operation not permitted' >&2\n"
        f"exit {compiler_jail.FAILED}\n"
    )
    failing.chmod(0o755)
    monkeypatch.setattr(compiler_jail, "build", lambda folder, cxx: failing)
    fallback = Builder(resolve_backend("cpu"), cache_dir=cache_dir)
    assert not fallback.isolation.sandboxed
    assert fallback.isolation.notes == (f"{compiler_jail.MESSAGE} unshare CLONE_NEWUSER: Operation not permitted",)
    workspace = relu_workspace(tmp_path)
    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + f"\nstatic const int t_{unique()} = 2;\n")
    assert fallback.build(workspace).status is Status.OK
    off = Builder(resolve_backend("cpu"), cache_dir=cache_dir, options=BuildOptions(sandbox=False))
    assert not off.isolation.sandboxed and "BuildOptions.sandbox=False" in off.isolation.summary()


def test_the_first_compile_does_not_wait_for_the_precompiled_header(
    builder: Builder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fresh cache the header is built in the background: the compile goes on without it and is done first."""
    started, release = threading.Event(), threading.Event()

    def slow_header(self: Builder, folder: Path, text: str, flags: list[str]) -> Path | None:
        started.set()
        release.wait(120)
        return None

    monkeypatch.setattr(Builder, "_build_header", slow_header)
    monkeypatch.setattr(Builder, "pch_folder", lambda self, text=build.PCH_HEADER, flags=None: tmp_path / "new-pch")
    workspace = relu_workspace(tmp_path)
    workspace.write(KERNEL, (workspace.path / KERNEL).read_text() + f"\nstatic const int first_{unique()} = 3;\n")
    try:
        result = builder.build(workspace)
        assert result.status is Status.OK, result.diagnostics
        assert started.is_set() and not release.is_set()  # the header was still being built when the compile ended
        assert result.commands and not any("cudagym_pch.h" in command for command in result.commands)
    finally:
        release.set()
        build.join_background_headers(60)


def test_a_background_header_build_that_raises_reaches_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise OSError("no space left on the device")

    with caplog.at_level("WARNING", logger="cudagym.build"):
        build._build_in_background(tmp_path / "pch", broken)
        build.join_background_headers(timeout=30)
    assert "precompiled header in the background failed" in caplog.text and "no space left" in caplog.text
