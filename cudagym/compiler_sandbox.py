"""The compiler's sandbox: g++, nvcc, ccache and the linker see only what a build needs.

The agent writes the sources, and a source can make the compiler read files: ``#include "/abs/path"``,
``asm(".incbin \\"/path\\"")`` (which can also read at an offset) or a ``#include`` that walks up with ``..``. So
every compiler and linker process of a build runs through ``cudagym.compiler_jail``'s launcher, in new user,
mount, network, IPC and PID namespaces, in a private root made of bind mounts:

* read-only: the toolchain (``/usr`` and the top-level system folders or their links, the few /etc files the
  dynamic loader and the compiler read, the installation of the compilers, ccache and linkers found), the
  CUDA toolkit, torch's include and lib folders, Python's include folders, pybind11's headers, and the folders
  of ``LD_LIBRARY_PATH``; the cudagym package's own folders (its task set with the reference solutions among
  them) are hidden under an empty tmpfs wherever one of those folders holds them;
* per command, what that command needs: the workspace (read-only), the precompiled header (read-only; its folder
  read-write for the command that builds it), ccache's folder (read-write), the objects being linked
  (read-only, one by one) and the link's output folder, and a private temp folder (TMPDIR and HOME);
* /dev/null, /dev/zero, /dev/full, /dev/random and /dev/urandom; no /proc, no network.

Nothing else is there: not the user's home, not the cache's other objects and builds, not other workspaces, not
the reference process. Paths keep their names (a folder is bound at its own path, with the symbolic links that
lead to it), so commands, the precompiled header and ccache's keys are the same inside as outside.

Where the machine allows no user namespaces (or ``BuildOptions.sandbox`` is False) the compiler runs as before, with
the user's reach, and ``CompilerSandbox.isolation.notes`` says why.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
import os
import shutil
import subprocess
import sysconfig
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from cudagym import compiler_jail
from cudagym.backends import Toolchain

logger = logging.getLogger(__name__)

# the system's own folders (or links to them) and the files the dynamic loader and the compiler driver read
SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ccache.conf",
)
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
TOOLS = ("g++", "gcc", "c++", "cc", "as", "ld", "ld.gold", "ld.lld", "mold", "ccache", "nvcc")  # found on PATH
PACKAGES = ("tasks", "baselines", "envs", "wrappers", "reward_shaping")  # cudagym's folders that may lie elsewhere
PROBE_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class CompilerIsolation:
    """What the compiler processes of a builder get (``Builder.isolation``)."""

    # own user, mount, network, IPC and PID namespaces; a private root of ``view`` and each command's own folders
    sandboxed: bool = False
    view: tuple[str, ...] = ()  # what every compile sees (read-only), as asked for (links resolved inside)
    hidden: tuple[str, ...] = ()  # cudagym's folders, hidden where a folder of ``view`` holds them
    notes: tuple[str, ...] = ()  # why there is no sandbox (then the compiler runs with the user's reach)

    def summary(self) -> str:
        """One line for a report."""
        if self.sandboxed:
            return "compiler sandbox: user, mount, network, IPC and PID namespaces; a private read-only root"
        return "no compiler sandbox" + ("; " + "; ".join(self.notes) if self.notes else "")


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _resolve(path: str, links: dict[str, str], depth: int = 0) -> str | None:
    """The real path of the absolute ``path``, or None where it does not exist; every symbolic link met on the way
    is recorded in ``links`` (its place, under a real folder, and its text)."""
    if depth > 40:
        return None  # a loop of links
    current = "/"
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            text = os.readlink(candidate)
            links[candidate] = text
            target = _resolve(os.path.join(current, text), links, depth + 1)
            if target is None:
                return None
            current = target
        else:
            current = candidate
    return current if os.path.exists(current) else None


@dataclasses.dataclass
class Mounts:
    """Real paths to bind (True: read-write) and the symbolic links that lead to them (place: text)."""

    binds: dict[str, bool] = dataclasses.field(default_factory=dict)
    links: dict[str, str] = dataclasses.field(default_factory=dict)

    def add(self, paths: Iterable[str], *, writable: bool) -> Mounts:
        """Adds ``paths`` (those that exist; relative ones from the working directory); returns self."""
        for path in paths:
            found: dict[str, str] = {}
            real = _resolve(os.path.join(os.getcwd(), path), found)
            if real is not None:
                self.links.update(found)
                self.binds[real] = self.binds.get(real, False) or writable
        return self

    def copy(self) -> Mounts:
        return Mounts(dict(self.binds), dict(self.links))


def plan(mounts: Mounts, hidden: Iterable[str] = ()) -> list[str]:
    """The launcher's operations (``compiler_jail``) for a root that shows ``mounts`` (each at its own path, with
    the symbolic links that lead to it) and hides ``hidden`` wherever a read-only folder holds it. A path inside
    a bound folder of the same kind is not bound again."""
    kept: list[tuple[str, bool]] = []
    for path in sorted(mounts.binds):
        holder = next((p for p, _ in reversed(kept) if _under(path, [p])), None)
        if holder is None or mounts.binds[holder] != mounts.binds[path]:
            kept.append((path, mounts.binds[path]))
    bound = [p for p, _ in kept]
    ops: list[str] = []
    for place in sorted(mounts.links):
        if not _under(place, bound):
            ops += ["-l", mounts.links[place], place]
    for path, write in kept:
        ops += ["-w" if write else "-r", path]
    read_only = [p for p, write in kept if not write]
    for folder in sorted({os.path.realpath(h) for h in hidden}):
        if os.path.isdir(folder) and folder not in bound and _under(folder, read_only):
            ops += ["-m", folder]
    return ops


def _prefix(tool: str | None) -> list[str]:
    """The installation of ``tool`` (a name on PATH or a path): the folder of its real file and, for a ``bin``
    folder, the folder above it (never ``/``)."""
    found = shutil.which(tool) if tool else None
    if not found:
        return []
    folder = Path(os.path.realpath(found)).parent
    above = folder.parent if folder.name == "bin" and folder.parent != Path("/") else None
    return [str(folder)] + ([str(above)] if above else [])


def _search_dirs(cxx: str) -> list[str]:
    """The folders the compiler driver itself looks in (``-print-search-dirs``)."""
    try:
        out = subprocess.run([cxx, "-print-search-dirs"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        name, _, value = line.partition(": ")
        if name in ("install", "programs", "libraries"):
            found += [os.path.normpath(p.lstrip("=")) for p in value.split(":") if p.strip()]
    return found


def toolchain_view(toolchain: Toolchain, *, cuda: bool) -> tuple[str, ...]:
    """What every compile of a builder sees read-only (see the module docstring)."""
    paths = list(SYSTEM_PATHS)
    for tool in (toolchain.cxx, *TOOLS):
        paths += _prefix(tool)
    paths += _search_dirs(toolchain.cxx)
    paths += [*toolchain.torch_includes, toolchain.torch_lib, toolchain.python_include]
    paths.append(sysconfig.get_path("platinclude", scheme="posix_prefix"))
    pybind11 = importlib.util.find_spec("pybind11")
    if pybind11 is not None and pybind11.submodule_search_locations:
        paths += [os.path.join(p, "include") for p in pybind11.submodule_search_locations]
    if cuda:
        paths += _prefix(toolchain.nvcc)
        if toolchain.cuda_home:
            paths += [toolchain.cuda_home, *(os.path.join(toolchain.cuda_home, d) for d in ("include", "lib64"))]
    paths += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p.startswith("/")]
    unique = dict.fromkeys(os.path.normpath(p) for p in paths if p)
    return tuple(p for p in unique if os.path.lexists(p))


@functools.lru_cache(maxsize=1)
def hidden_folders() -> tuple[str, ...]:
    """The cudagym package's folders (its task set, baselines, ...), wherever they are installed."""
    import cudagym

    found = {os.path.realpath(p) for p in cudagym.__path__}
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(f"cudagym.{name}")
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            found.update(os.path.realpath(p) for p in spec.submodule_search_locations)
    return tuple(sorted(found))


class CompilerSandbox:
    """The sandbox of one builder's compiler processes (see the module docstring).

    ``setting``: True or "auto" (where the machine allows it), False (never). The launcher is built into
    ``cache_dir / "jail"`` and the machine is probed on first use (``isolation``), once per sandbox.
    """

    def __init__(self, toolchain: Toolchain, cache_dir: Path, *, cuda: bool, setting: bool | Literal["auto"]) -> None:
        self.toolchain = toolchain
        self.cuda = cuda
        self.setting = setting
        self.folder = cache_dir / "jail"
        self.root = self.folder / "root"  # the mount point of every launcher's private root (empty here)
        self._lock = threading.Lock()
        self._isolation: CompilerIsolation | None = None
        self._launcher: Path | None = None
        self._base = Mounts()  # the toolchain's view and the device nodes, resolved once

    @property
    def isolation(self) -> CompilerIsolation:
        """What the compiler processes get here (found on first use)."""
        with self._lock:
            if self._isolation is None:
                self._isolation = self._probe()
                if not self._isolation.sandboxed:
                    logger.info("compilers run without a sandbox: %s", self._isolation.summary())
            return self._isolation

    def prefix(self, *, cwd: Path, readonly: Sequence[Path] = (), writable: Sequence[Path] = ()) -> list[str]:
        """The launcher and its operations, to put before a command that runs in ``cwd`` and sees the toolchain,
        ``readonly`` and ``writable`` (which must exist); [] where there is no sandbox."""
        isolation = self.isolation
        if not isolation.sandboxed:
            return []
        return self._command(cwd, readonly, writable)

    def _command(self, cwd: Path, readonly: Sequence[Path], writable: Sequence[Path]) -> list[str]:
        assert self._launcher is not None
        mounts = self._base.copy().add(map(str, readonly), writable=False).add(map(str, writable), writable=True)
        ops = plan(mounts, hidden_folders())
        holders = [ops[i + 1] for i, op in enumerate(ops) if op in ("-r", "-w")]
        root = os.path.realpath(self.root)
        if any(_under(root, [p]) or _under(p, [root]) for p in holders):
            raise ValueError(f"the compiler sandbox cannot show a folder that holds its own root ({root})")
        return [str(self._launcher), root, *ops, "-c", str(cwd), "--"]

    def _probe(self) -> CompilerIsolation:
        """Builds the launcher and runs the compiler's ``--version`` in the sandbox."""
        if self.setting is False:
            return CompilerIsolation(notes=("turned off (BuildOptions.sandbox=False)",))
        try:
            self._launcher = compiler_jail.build(self.folder, self.toolchain.cxx)
            self.root.mkdir(parents=True, exist_ok=True)
            view = toolchain_view(self.toolchain, cuda=self.cuda)
            self._base = Mounts().add(view, writable=False).add(DEVICES, writable=True)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            return CompilerIsolation(notes=(f"its launcher could not be built: {exc}",))
        tools = [self.toolchain.cxx] + ([self.toolchain.nvcc] if self.cuda and self.toolchain.nvcc else [])
        with tempfile.TemporaryDirectory(prefix="cudagym-cc-") as scratch:
            for tool in tools:
                try:
                    command = [*self._command(Path(scratch), (), [Path(scratch)]), tool, "--version"]
                    done = subprocess.run(
                        command,
                        capture_output=True,
                        text=True,
                        timeout=PROBE_TIMEOUT_S,
                        env=dict(os.environ, LC_ALL="C"),
                    )
                except (OSError, ValueError, subprocess.SubprocessError) as exc:
                    return CompilerIsolation(notes=(f"the sandbox's probe failed: {exc}",))
                if done.returncode != 0:
                    lines = [line for line in done.stderr.splitlines() if line.strip()]
                    why = next((line for line in lines if line.startswith(compiler_jail.MESSAGE)), None)
                    why = why or f"{Path(tool).name} --version exited with {done.returncode}: {' '.join(lines[-3:])}"
                    return CompilerIsolation(notes=(why,))
        return CompilerIsolation(sandboxed=True, view=view, hidden=hidden_folders())
