"""Building a workspace into the ``cuda_extension`` module, compiling only what changed.

Every translation unit's object is cached under a hash of everything that can change it (compiler,
flags, the file, every header of the workspace); a whole build is cached under the hash of its
objects and link flags. Binding files (those including torch headers) are compiled against a
precompiled header of the torch binding headers, built once per toolchain and flags. The cache stays bounded: the
builder marks every entry it serves as used and sweeps the least recently used ones (``cudagym.cache_bound``).
Compilers run in parallel with the C locale, in a fresh directory, under a timeout; they never run the agent's code.
Where the machine allows it they run in the compiler sandbox (``cudagym.compiler_sandbox``): a private root that
shows the toolchain, the workspace and the cache folders each command needs, nothing else, and no network
(``Builder.isolation``).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fcntl
import functools
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from cudagym import cache_bound, compiler_jail
from cudagym.backends import Backend, Toolchain, find_toolchain
from cudagym.cache_bound import CacheLimits
from cudagym.compiler_sandbox import CompilerIsolation, CompilerSandbox
from cudagym.errors import CudaGymError
from cudagym.results import CompileResult, KernelResources, Stage, Status
from cudagym.text import clean
from cudagym.workspace import TEMPLATES, Workspace

logger = logging.getLogger(__name__)

EXTENSION_NAME = "cuda_extension"
_TORCH_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"](torch/|ATen/|c10/|pybind11/|binding_registry\.h)', re.M)
# What binding files include (binding_registry.h), and on CUDA builds of torch the current-stream header every
# CUDA binding includes as well (it pulls in the CUDA runtime headers; seconds of every binding's compile;
# WITH_CUDA: the cuda backend, which puts the CUDA headers on the include path).
PCH_HEADER = (
    "#include <ATen/ATen.h>\n#include <torch/csrc/utils/pybind.h>\n#include <torch/types.h>\n"
    "#if defined(WITH_CUDA) && __has_include(<c10/cuda/impl/cuda_cmake_macros.h>)\n"
    "#include <c10/cuda/CUDAStream.h>\n#endif\n"
)


def default_cache_dir() -> Path:
    """``$CUDAGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/cudagym``, else ``~/.cache/cudagym``."""
    if os.environ.get("CUDAGYM_CACHE_DIR"):
        return Path(os.environ["CUDAGYM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cudagym"


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """Compiler settings; the defaults follow CUDA Agent's compile script (-O3, fast math)."""

    cxx_flags: tuple[str, ...] = ("-O3", "-march=native", "-fopenmp")
    binding_flags: tuple[str, ...] = ("-O2",)
    nvcc_flags: tuple[str, ...] = ("-O3", "--use_fast_math", "-std=c++17", "-lineinfo")
    timeout_seconds: float = 300.0
    jobs: int = 0  # parallel compiler processes; 0 = one per core
    use_pch: bool = True
    # single-file solutions (cudagym.inline_build): a CUDA source that includes torch/extension.h is compiled first
    # against torch/types.h in its place where that cannot change what it means (cudagym.light_headers), and as
    # written where that copy fails; False: always as written
    light_headers: bool = True
    # single-file solutions: a CUDA source is first compiled as two units, its kernels without torch's headers (nvcc)
    # and its host code against a precompiled header (the C++ compiler), where that cannot change what it means
    # (cudagym.kernel_split); else, or where a unit fails, as above. False: never split
    split_sources: bool = True
    # False: a compile that finds the precompiled header not built yet compiles without it while it is built in the
    # background (a fresh machine's first compile never waits for it); True: the compile waits for it
    wait_for_pch: bool = False
    # compile through ccache where it is installed (its own cache under <cache>/ccache unless $CCACHE_DIR is set):
    # it also serves an edit that changes no preprocessed token (a comment), which the object cache cannot
    ccache: bool = True
    diagnostics_chars: int = 12000
    # the compiler sandbox (cudagym.compiler_sandbox): True or "auto": wherever the machine allows it (else the
    # compiler runs with the user's reach, and Builder.isolation.notes says why); False: never
    sandbox: bool | Literal["auto"] = "auto"
    # how large the cache may grow: least recently used builds, objects and headers go first (cudagym.cache_bound)
    cache_limits: CacheLimits = dataclasses.field(default_factory=CacheLimits)


@dataclasses.dataclass(frozen=True)
class CompileUnit:
    """One translation unit: its compiler command (without ``-o``) and the content key its object is cached under."""

    source: Path
    kind: str  # "cu", "binding" or "cxx"
    command: tuple[str, ...]
    key: str
    pch: Path | None = None  # the precompiled header it includes
    # its warnings are not shown: a unit cudagym made from the agent's file (cudagym.kernel_split), whose warnings
    # (a constant only the other unit uses, say) the file itself would not give
    quiet: bool = False
    # the folder its compiler sees and runs in (a snapshot of the files its key covers); None: the build's folder
    root: Path | None = None


@dataclasses.dataclass(frozen=True)
class BuildSnapshot:
    """The files a workspace build compiles, copied once: each unit's compiler sees a folder of its own holding
    exactly what its object's cache key covers (the fixed binding files from the package's templates, the
    workspace's headers, and the unit's own source), read once from the workspace.

    The compilers then never read the workspace, which may change while they run: an environment whose job was
    answered at its deadline writes the agent's next files while the stale build still compiles. Compiled in place,
    such a build would cache an object of the new text under the key of the old one (a later build of the old
    text would link code it never had, and the static checks it passed would have read other code), and a source
    could include a workspace file its key does not cover (``model_new.py``, another kernel source).
    """

    units: tuple[tuple[Path, Path], ...]  # (source, the folder its compiler sees)
    header_digest: str

    @classmethod
    def take(cls, workspace: Workspace, folder: Path) -> BuildSnapshot:
        """Copies ``workspace``'s build inputs into per-unit folders under ``folder`` (binding.cpp first)."""
        fixed = {name: (TEMPLATES / name).read_bytes() for name in ("binding.cpp", "binding_registry.h")}
        headers = dict(workspace.headers((".h", ".cuh")))
        sources = [(Path("binding.cpp"), fixed["binding.cpp"])]
        sources += [(Path("kernels") / p.name, p.read_bytes()) for p in workspace.kernel_sources()]
        units = []
        for index, (relative, text) in enumerate(sources):
            root = folder / str(index)
            (root / "kernels").mkdir(parents=True)
            (root / "binding_registry.h").write_bytes(fixed["binding_registry.h"])
            for name, header in headers.items():
                (root / "kernels" / name).write_bytes(header)
            (root / relative).write_bytes(text)
            units.append((root / relative, root))
        digest = content_hash(
            *(name.encode() + b"\0" + header for name, header in headers.items()), fixed["binding_registry.h"]
        )
        return cls(tuple(units), digest)


def write_folder_once(folder: Path, files: Sequence[tuple[str, bytes]]) -> Path:
    """``folder`` (named by its content) holding ``files`` (path inside it, bytes): written under a temporary name
    beside it and renamed into place, so readers see all of it or nothing; where it exists already it is left as it
    is and marked as used (``cache_bound``: not swept while in use)."""
    if folder.is_dir():
        cache_bound.touch(folder)
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=folder.parent))
    for name, data in files:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
    try:
        tmp.rename(folder)
    except OSError:  # another process wrote the same content first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def content_hash(*parts: bytes | str) -> str:
    """The sha256 (hex) of ``parts``, each ended by a NUL (so ``("ab", "c")`` and ``("a", "bc")`` differ)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


def _atomic_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


class Builder:
    """Compiles workspaces for one backend, sharing a cache directory with other builders and processes."""

    def __init__(
        self,
        backend: Backend,
        *,
        cache_dir: str | Path | None = None,
        options: BuildOptions | None = None,
        toolchain: Toolchain | None = None,
    ) -> None:
        self.backend = backend
        self.options = options or BuildOptions()
        self.toolchain = toolchain or find_toolchain()
        self.cache_dir = _atomic_dir(Path(cache_dir) if cache_dir else default_cache_dir())
        self.objects_dir = _atomic_dir(self.cache_dir / "objects")
        self.builds_dir = _atomic_dir(self.cache_dir / "builds")
        self.sandbox = CompilerSandbox(
            self.toolchain, self.cache_dir, cuda=backend.is_cuda, setting=self.options.sandbox
        )

    @property
    def isolation(self) -> CompilerIsolation:
        """What this builder's compiler and linker processes get (the same for every build; found on first use)."""
        return self.sandbox.isolation

    def _run(
        self,
        cmd: Sequence[str],
        cwd: Path,
        scratch: Path,
        *,
        readonly: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        extra_env: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """Runs one compiler or linker command in the sandbox (where there is one), which shows it the toolchain,
        ``readonly``, ``writable`` and ``scratch``, its private temp folder (TMPDIR and HOME). A sandbox that cannot
        be set up for it is an error of that command, with the reason as its output."""
        try:
            jail = self.sandbox.prefix(cwd=cwd, readonly=readonly, writable=[scratch, *writable])
        except (OSError, ValueError) as exc:
            logger.warning("the compiler sandbox could not be set up for %s: %s", Path(cmd[0]).name, exc)
            return compiler_jail.FAILED, f"{compiler_jail.MESSAGE} {exc}"
        env = dict(extra_env or {})
        if jail:
            env.update(TMPDIR=str(scratch), HOME=str(scratch))
        return _run(cmd, self.options.timeout_seconds, cwd, env or None, jail=jail)

    # -- flags -------------------------------------------------------------------------------------

    def _includes(self, workspace: Path) -> list[str]:
        return [f"-I{workspace}", f"-I{workspace / 'kernels'}"]

    def _torch_flags(self) -> list[str]:
        tc = self.toolchain
        flags = [f"-DTORCH_EXTENSION_NAME={EXTENSION_NAME}", "-DTORCH_API_INCLUDE_EXTENSION_H"]
        for inc in (*tc.torch_includes, tc.python_include):
            flags += ["-isystem", inc]
        if self.backend.is_cuda and tc.cuda_home:
            flags += ["-DWITH_CUDA", "-isystem", str(Path(tc.cuda_home) / "include")]
        return flags

    def binding_base_flags(self) -> list[str]:
        """Flags of binding translation units (and of the precompiled header, which must match)."""
        return ["-fPIC", "-std=c++20", *self.options.binding_flags, *self._torch_flags()]

    def _unit(self, source: Path, workspace: Path, header_digest: str, pch: Path | None) -> CompileUnit:
        tc = self.toolchain
        text = source.read_bytes()
        if source.suffix == ".cu":
            if not self.backend.is_cuda or not tc.nvcc:
                raise _SetupError(
                    f"{source.name}: .cu files need the cuda backend; on the cpu backend write C++ kernels "
                    f"(kernels/*.cpp) instead."
                )
            cmd = nvcc_command(
                tc.nvcc, [f"-arch={self.backend.arch}"], [*self.options.nvcc_flags, *self._includes(workspace)], source
            )
            kind = "cu"
        elif _TORCH_INCLUDE_RE.search(text.decode("utf-8", errors="replace")):
            cmd = [tc.cxx, *self.binding_base_flags(), "-fdiagnostics-color=never"]
            if pch is not None:
                cmd += ["-include", str(pch), "-Winvalid-pch"]
            cmd += [*self._includes(workspace), "-c", str(source)]
            kind = "binding"
        else:
            cmd = [
                tc.cxx,
                "-fPIC",
                "-std=c++20",
                *self.options.cxx_flags,
                "-fdiagnostics-color=never",
                *self._includes(workspace),
                "-c",
                str(source),
            ]
            kind = "cxx"
        # the key ignores the workspace's path: the same files give the same object in any workspace
        portable = [c.replace(str(workspace), "<ws>") for c in cmd]
        key = content_hash(tc.torch_version, self.backend.name, self.backend.arch, *portable, text, header_digest)
        return CompileUnit(source, kind, tuple(cmd), key, pch if kind == "binding" else None, root=workspace)

    # -- precompiled header ------------------------------------------------------------------------

    def pch_folder(self, text: str = PCH_HEADER, flags: Sequence[str] | None = None) -> Path:
        """Where the precompiled header ``text`` (the binding headers by default) for ``flags`` (the binding flags by
        default) lives: one folder per compiler binary, torch version, header text and flags, however the compiler
        and the include folders are spelled (``g++``, ``/usr/bin/g++`` and a symlink to it share one)."""
        real = [_real_path(flag) for flag in (self.binding_base_flags() if flags is None else flags)]
        key = content_hash(compiler_identity(self.toolchain.cxx), self.toolchain.torch_version, text, *real)[:20]
        return self.cache_dir / "pch" / key

    def precompiled_header(
        self, text: str = PCH_HEADER, flags: Sequence[str] | None = None, *, wait: bool = True
    ) -> Path | None:
        """The PCH of ``text`` (the binding headers by default) for ``flags`` (the binding flags by default), built
        once (under a file lock) and shared; None where it cannot be used. ``wait=False``: a header not built yet is
        built in a background thread and None is returned at once (the caller compiles without it meanwhile)."""
        if not self.options.use_pch:
            return None
        flags = list(self.binding_base_flags() if flags is None else flags)
        folder = _atomic_dir(self.pch_folder(text, flags))
        header = folder / "cudagym_pch.h"
        gch = folder / "cudagym_pch.h.gch"
        if gch.exists():
            cache_bound.touch(folder)
            return header
        if (folder / "FAILED").exists():
            return None
        if not wait:
            _build_in_background(folder, lambda: self._build_header(folder, text, flags))
            return None
        return self._build_header(folder, text, flags)

    def _build_header(self, folder: Path, text: str, flags: list[str]) -> Path | None:
        """Builds the precompiled header in ``folder`` under its file lock (one builder at a time on the machine)."""
        header = folder / "cudagym_pch.h"
        gch = folder / "cudagym_pch.h.gch"
        failed = folder / "FAILED"
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if gch.exists():
                return header
            if failed.exists():
                return None
            for stale in folder.glob("tmp-*.gch"):  # a build whose process ended first (the lock is ours now)
                stale.unlink(missing_ok=True)
            header.write_text(text)
            logger.info("building the precompiled header in %s", folder)
            started = time.monotonic()
            tmp = folder / f"tmp-{os.getpid()}-{threading.get_ident()}.gch"
            with tempfile.TemporaryDirectory(prefix="cudagym-cc-") as scratch:
                command = [self.toolchain.cxx, *flags, "-x", "c++-header", str(header), "-o", str(tmp)]
                proc = self._run(command, folder, Path(scratch), writable=[folder])
            if proc[0] != 0:
                failed.write_text(proc[1])
                tmp.unlink(missing_ok=True)
                logger.warning("the precompiled header failed to build (bindings compile without it): %s", failed)
                return None
            tmp.rename(gch)
            logger.info("precompiled header built in %.1f s", time.monotonic() - started)
        cache_bound.maybe_sweep(self.cache_dir, self.options.cache_limits)
        return header

    def _built_unit(self, source: Path, workspace: Path, header_digest: str, pch: Path | None) -> CompileUnit:
        """The unit of ``source``: compiled against ``pch`` where given, unless its object compiled without the
        header (while it was being built) is in the cache already, which serves just as well."""
        unit = self._unit(source, workspace, header_digest, pch)
        if unit.pch is None or (self.objects_dir / f"{unit.key}.o").exists():
            return unit
        plain = self._unit(source, workspace, header_digest, None)
        return plain if (self.objects_dir / f"{plain.key}.o").exists() else unit

    # -- build -------------------------------------------------------------------------------------

    def build(self, workspace: Workspace) -> CompileResult:
        """Compiles ``kernels/*.cu|*.cpp`` and ``binding.cpp`` and links ``cuda_extension``."""
        result = self._build(workspace)
        logger.log(
            logging.DEBUG if result.cached else logging.INFO,
            "compile: %s in %.2f s (%d compiled, %d reused)%s",
            result.status.value,
            result.seconds,
            result.objects_compiled,
            result.objects_reused,
            f": {result.message}" if not result.ok else "",
        )
        return result

    def _build(self, workspace: Workspace) -> CompileResult:
        start = time.monotonic()
        sources = workspace.kernel_sources()
        if not sources:
            return _fail(Status.COMPILE_ERROR, "Nothing to compile: write kernels/*.cu or kernels/*.cpp first.", start)
        with tempfile.TemporaryDirectory(prefix="cudagym-build-") as folder:
            snapshot = BuildSnapshot.take(workspace, Path(folder))
            try:
                # binding.cpp always wants the header; a kernel file only when it includes torch's headers
                pch = self.precompiled_header(wait=self.options.wait_for_pch)
                units = [self._built_unit(source, root, snapshot.header_digest, pch) for source, root in snapshot.units]
            except _SetupError as e:
                return _fail(Status.COMPILE_ERROR, str(e), start)
            return self.build_units(units, Path(folder), start=start)

    def build_units(
        self,
        units: Sequence[CompileUnit],
        ws: Path,
        *,
        start: float,
        name: str = EXTENSION_NAME,
        link_extra: Sequence[str] = (),
        readonly: Sequence[Path] = (),
    ) -> CompileResult:
        """Compiles the units whose objects are not cached (in ``ws``, which the compiler sees with the folders of
        ``readonly``) and links ``name`` with ``link_extra``; a build of the same objects and flags is served from the
        cache. Diagnostics and commands name the files of ``ws``, of the units' own folders and of ``readonly``
        relative to their folder."""
        link_flags = self._link_flags(link_extra)
        build_key = content_hash(*(u.key for u in units), *link_flags, name)
        artifact = self.builds_dir / build_key[:32] / f"{name}.so"
        ptxas_logs = {u.source.name: self.objects_dir / f"{u.key}.log" for u in units if u.kind == "cu"}
        if artifact.exists():
            cache_bound.touch(artifact.parent)
            return CompileResult(
                stage=Stage.COMPILE,
                status=Status.OK,
                message="Build is up to date (cached).",
                seconds=time.monotonic() - start,
                cached=True,
                objects_reused=len(units),
                artifact=str(artifact),
                build_hash=build_key[:16],
                kernels=_resources(ptxas_logs),
            )
        todo = [u for u in units if not (self.objects_dir / f"{u.key}.o").exists()]
        for unit in units:
            if unit not in todo:
                cache_bound.touch(self.objects_dir / f"{unit.key}.o")
        outputs = self._compile_all(todo, ws, readonly)
        failures = [(u, out) for u, (code, out) in zip(todo, outputs, strict=False) if code != 0]
        warnings = [
            (u, out) for u, (code, out) in zip(todo, outputs, strict=False) if code == 0 and out.strip() and not u.quiet
        ]
        replace = {str(ws): "", str(self.cache_dir): "<cache>", **{str(u.root): "" for u in todo if u.root}}
        replace.update({str(folder): "" for folder in readonly})
        diag_parts = [out for _, out in failures] + [
            out for u, out in warnings if u.kind != "cu" or "warning" in out or "error" in out
        ]
        diagnostics = clean("\n".join(diag_parts), self.options.diagnostics_chars, replace_paths=replace)
        commands = tuple(clean(" ".join(u.command), 2000, replace_paths=replace) for u in todo)
        if failures:
            names = ", ".join(u.source.name for u, _ in failures)
            return CompileResult(
                stage=Stage.COMPILE,
                status=Status.COMPILE_ERROR,
                message=f"Compilation failed in {names}.",
                seconds=time.monotonic() - start,
                diagnostics=diagnostics,
                commands=commands,
                objects_compiled=len(todo) - len(failures),
                objects_reused=len(units) - len(todo),
            )
        code, link_out = self._link(units, artifact, link_extra)
        cache_bound.maybe_sweep(self.cache_dir, self.options.cache_limits)
        if code != 0:
            link_diag = clean(link_out, self.options.diagnostics_chars, replace_paths=replace)
            return CompileResult(
                stage=Stage.COMPILE,
                status=Status.COMPILE_ERROR,
                message="Linking failed.",
                seconds=time.monotonic() - start,
                diagnostics=link_diag,
                commands=commands,
                objects_compiled=len(todo),
                objects_reused=len(units) - len(todo),
            )
        return CompileResult(
            stage=Stage.COMPILE,
            status=Status.OK,
            message=f"Built {name} ({len(todo)} compiled, {len(units) - len(todo)} reused).",
            seconds=time.monotonic() - start,
            diagnostics=diagnostics,
            commands=commands,
            objects_compiled=len(todo),
            objects_reused=len(units) - len(todo),
            artifact=str(artifact),
            build_hash=build_key[:16],
            kernels=_resources(ptxas_logs),
        )

    def _compile_all(
        self, units: Sequence[CompileUnit], ws: Path, readonly: Sequence[Path] = ()
    ) -> list[tuple[int, str]]:
        if not units:
            return []
        jobs = self.options.jobs or os.cpu_count() or 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(jobs, len(units))) as pool:
            return list(pool.map(lambda u: self._compile_one(u, ws, readonly), units))

    def _compile_one(self, unit: CompileUnit, ws: Path, also_readonly: Sequence[Path] = ()) -> tuple[int, str]:
        started = time.monotonic()
        final = self.objects_dir / f"{unit.key}.o"
        ws = unit.root or ws
        with tempfile.TemporaryDirectory(prefix="cudagym-cc-") as tmp:
            out = Path(tmp) / "out.o"
            command = [*unit.command, "-o", str(out)]
            launcher = ccache_path() if self.options.ccache else None
            extra = ccache_env(self.cache_dir, ws, self.options.cache_limits) if launcher else None
            writable = []
            if extra is not None:
                writable.append(_atomic_dir(Path(extra["CCACHE_DIR"])))
            readonly = [ws, *also_readonly] + ([unit.pch.parent] if unit.pch is not None else [])
            code, text = self._run(
                [launcher, *command] if launcher else command,
                ws,
                Path(tmp),
                readonly=readonly,
                writable=writable,
                extra_env=extra,
            )
            if code == 0:
                if unit.kind == "cu":
                    (self.objects_dir / f"{unit.key}.log").write_text(text)
                shutil.move(str(out), str(final.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")))
                os.replace(final.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp"), final)
        logger.debug(
            "%s (%s%s): %s in %.2f s",
            unit.source.name,
            unit.kind,
            ", against its precompiled header" if unit.pch is not None else "",
            "compiled" if code == 0 else f"failed ({code})",
            time.monotonic() - started,
        )
        return code, text

    def _link_flags(self, extra: Sequence[str] = ()) -> list[str]:
        tc = self.toolchain
        flags = [
            "-shared",
            "-fopenmp",
            *fast_linker(tc.cxx),
            f"-L{tc.torch_lib}",
            f"-Wl,-rpath,{tc.torch_lib}",
            "-lc10",
            "-ltorch",
            "-ltorch_cpu",
            "-ltorch_python",
        ]
        if self.backend.is_cuda and tc.cuda_home:
            lib = Path(tc.cuda_home) / "lib64"
            flags += [f"-L{lib}", f"-Wl,-rpath,{lib}", "-lcudart", "-lc10_cuda", "-ltorch_cuda"]
        return [*flags, *extra]

    def _link(self, units: Sequence[CompileUnit], artifact: Path, extra: Sequence[str] = ()) -> tuple[int, str]:
        folder = artifact.parent
        tmp_dir = Path(tempfile.mkdtemp(prefix="link-", dir=self.builds_dir))
        scratch = Path(tempfile.mkdtemp(prefix="cudagym-cc-"))
        try:
            tmp = tmp_dir / artifact.name
            objects = [self.objects_dir / f"{u.key}.o" for u in units]
            flags = self._link_flags(extra)

            def link(flags: list[str]) -> tuple[int, str]:
                command = [self.toolchain.cxx, *map(str, objects), *flags, "-o", str(tmp)]
                return self._run(command, tmp_dir, scratch, readonly=objects, writable=[tmp_dir])

            code, out = link(flags)
            faster = fast_linker(self.toolchain.cxx)
            if code != 0 and faster:
                # a linker that links an empty library may still fail on torch's (gold did on the H200 machine,
                # where it could not find the compiler's libstdc++): the default linker decides, and is kept
                plain = [f for f in flags if f not in faster]
                code, plain_out = link(plain)
                if code == 0:
                    _FAST_LINKER_FAILED.add(self.toolchain.cxx)
                out = plain_out
            if code == 0:
                try:
                    tmp_dir.rename(folder)
                except OSError:  # another process finished the same build first
                    if not artifact.exists():
                        raise
            return code, out
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            shutil.rmtree(scratch, ignore_errors=True)


class _SetupError(CudaGymError):
    pass


_BACKGROUND: dict[Path, threading.Thread] = {}  # precompiled headers being built in this process, by folder
_BACKGROUND_LOCK = threading.Lock()


def _build_in_background(folder: Path, build: Callable[[], object]) -> None:
    """Runs ``build`` (a precompiled header's) in a daemon thread, unless one for ``folder`` is running already."""
    with _BACKGROUND_LOCK:
        running = _BACKGROUND.get(folder)
        if running is not None and running.is_alive():
            return
        thread = threading.Thread(target=_logging_failure, args=(build,), name="cudagym-pch", daemon=True)
        _BACKGROUND[folder] = thread
        thread.start()


def _logging_failure(build: Callable[[], object]) -> None:
    """Runs ``build``; what it raises goes to the log (a thread's exception would only reach stderr), and the compile
    that wants the header builds it again and reports its own error."""
    try:
        build()
    except Exception as exc:
        logger.warning("building the precompiled header in the background failed (the compile tries again): %r", exc)


def join_background_headers(timeout: float | None = None) -> None:
    """Waits for the precompiled headers being built in the background (benchmarks and tests)."""
    with _BACKGROUND_LOCK:
        threads = list(_BACKGROUND.values())
    for thread in threads:
        thread.join(timeout)


def nvcc_command(nvcc: str, arch: Sequence[str], flags: Sequence[str], source: Path) -> list[str]:
    """nvcc compiling ``source`` to an object (``-o`` added by the caller) for ``arch`` with ``flags``: position
    independent, with ptxas's per-kernel resource report (``parse_ptxas``)."""
    return [nvcc, *arch, "-Xcompiler", "-fPIC", "-Xptxas", "-v", *flags, "-c", str(source)]


def compiler_identity(cxx: str) -> str:
    """The compiler binary ``cxx`` names, however spelled: its resolved path, size and modification time (a
    reinstalled compiler is another one)."""
    found = shutil.which(cxx) or cxx
    real = os.path.realpath(found)
    try:
        info = os.stat(real)
    except OSError:
        return real
    return f"{real}:{info.st_size}:{info.st_mtime_ns}"


def _real_path(flag: str) -> str:
    """``flag`` resolved through symlinks where it is an absolute path (an ``-isystem`` folder), else as it is."""
    return os.path.realpath(flag) if flag.startswith("/") else flag


def _fail(status: Status, message: str, start: float) -> CompileResult:
    return CompileResult(
        stage=Stage.COMPILE, status=status, message=message, seconds=time.monotonic() - start, diagnostics=message
    )


FAST_LINKERS = ("-fuse-ld=mold", "-fuse-ld=lld", "-fuse-ld=gold")
LINKER_ENV = "CUDAGYM_LINKER"  # "default": the compiler's own linker (GNU ld), whatever else is installed
_FAST_LINKER_FAILED: set[str] = set()  # compilers whose fast linker failed a link the default one managed
_LINK_PROBE = b"#include <string>\nstd::string cudagym_probe(int n) { return std::to_string(n); }\n"


def fast_linker(cxx: str) -> tuple[str, ...]:
    """The flag of the fastest linker ``cxx`` can use (mold, lld, gold), or () for its default. Linking the
    binding objects against torch is most of a one-kernel rebuild's link step; gold halves it against GNU ld
    on the CI machine (0.36 -> 0.18 s). Each linker is tried once on a small C++ library with OpenMP; one
    that later fails a link the default linker manages is not used again by this process."""
    if os.environ.get(LINKER_ENV, "").strip().lower() == "default" or cxx in _FAST_LINKER_FAILED:
        return ()
    return _probe_fast_linker(cxx)


@functools.lru_cache(maxsize=4)
def _probe_fast_linker(cxx: str) -> tuple[str, ...]:
    for flag in FAST_LINKERS:
        with tempfile.TemporaryDirectory(prefix="cudagym-ld-") as tmp:
            try:
                proc = subprocess.run(
                    [cxx, flag, "-shared", "-fPIC", "-fopenmp", "-x", "c++", "-", "-o", str(Path(tmp) / "probe.so")],
                    input=_LINK_PROBE,
                    capture_output=True,
                    timeout=60,
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            if proc.returncode == 0:
                return (flag,)
    return ()


def ccache_path() -> str | None:
    """The ccache executable on PATH, or None."""
    return shutil.which("ccache")


def ccache_env(cache_dir: Path, workspace: Path, limits: CacheLimits | None = None) -> dict[str, str]:
    """ccache's settings for one compile: its cache beside cudagym's (unless the user set ``CCACHE_DIR``) and held to
    ``limits.ccache_max_size`` (unless the user set ``CCACHE_MAXSIZE``), paths under the workspace hashed as relative
    ones (so another workspace with the same files hits), and the sloppiness a precompiled header and freshly written
    files need to be cached at all."""
    return {
        "CCACHE_DIR": os.environ.get("CCACHE_DIR") or str(cache_dir / "ccache"),
        "CCACHE_MAXSIZE": os.environ.get("CCACHE_MAXSIZE") or (limits or CacheLimits()).ccache_max_size,
        "CCACHE_BASEDIR": str(workspace),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_SLOPPINESS": "pch_defines,time_macros,include_file_mtime,include_file_ctime",
    }


KILLED_AFTER = "[compiler killed after"  # how a compile's output ends where the timeout ended it


def _run(
    cmd: Sequence[str],
    timeout: float,
    cwd: Path,
    extra_env: dict[str, str] | None = None,
    jail: Sequence[str] = (),
) -> tuple[int, str]:
    """Runs a compiler in its own process group, behind ``jail`` (the compiler sandbox's launcher and its
    operations, ``CompilerSandbox.prefix``) when given; on timeout the group is killed (the launcher's and the
    compiler's processes are all in it)."""
    env = dict(os.environ, LC_ALL="C", LANG="C", **(extra_env or {}))
    proc = subprocess.Popen(
        [*jail, *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd, env=env, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return 124, out.decode(errors="replace") + f"\n{KILLED_AFTER} {timeout:.0f} s]"
    return proc.returncode, out.decode(errors="replace")


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def parse_ptxas(text: str) -> list[KernelResources]:
    """Per-kernel registers, shared memory, stack and spills from ``-Xptxas -v`` output."""
    kernels: list[dict[str, int | str]] = []
    for line in text.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            kernels.append({"name": m.group(1)})
        elif kernels and (m := _PTXAS_FRAME.search(line)):
            kernels[-1].update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif kernels and (m := _PTXAS_USED.search(line)):
            kernels[-1].update(registers=int(m.group(1)), shared_bytes=int(m.group(2) or 0))
    names = _demangle([str(k["name"]) for k in kernels])
    return [KernelResources(**{**k, "name": n}) for k, n in zip(kernels, names, strict=False)]  # type: ignore[arg-type]


def _demangle(names: list[str]) -> list[str]:
    tool = shutil.which("c++filt")
    if not names or tool is None:
        return names
    try:
        out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=10).stdout
    except (subprocess.SubprocessError, OSError):
        return names
    lines = out.splitlines()
    return lines if len(lines) == len(names) else names


def _resources(logs: dict[str, Path]) -> tuple[KernelResources, ...]:
    found: list[KernelResources] = []
    for path in logs.values():
        if path.exists():
            found += parse_ptxas(path.read_text(errors="replace"))
    return tuple(found)
