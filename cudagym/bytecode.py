"""A bytecode cache for the evaluation children, where the Python installation holds none.

Some installations ship no compiled bytecode (no ``__pycache__`` beside the sources) and forbid writing it:
container images built with ``PYTHONDONTWRITEBYTECODE=1``, packages installed by uv (which compiles bytecode only
when asked). Every process then compiles each module it imports from its source. On the H200 machine, whose image
is like that, importing torch, dynamo and the inductor took 13-18 s of one core per process; read from bytecode
the same imports take about a quarter of that (docs/benchmarks.md). Every child of an evaluator pays it: the
reference process, whose imports and first ``torch.compile`` are a cold cycle's critical path, the fork server and
every candidate started without it.

Where the cache is on (``Tuning.bytecode_cache``), every child gets ``PYTHONPYCACHEPREFIX=<cache>/pycache``:
Python then reads and writes bytecode only in that tree, which mirrors the source paths, and leaves the
installation untouched. Only trusted processes write it: the reference process and the fork server (before it
forks any candidate), whose first imports fill it. Candidates read it and never write (``-B``; a forked candidate
sets ``sys.dont_write_bytecode`` before anything of the agent's runs). Python checks each entry against its
source's modification time and size, so an edited source is compiled again.

A process that could write the tree could change what the trusted reference process runs, so ``"auto"`` turns the
cache on only where candidates cannot write it (their file system is read-only, ``ChildLimits.readonly_filesystem``)
or could write the installation itself anyway. Agents' own files (``model_new.py``) are always compiled from their
source, never read from bytecode.

Kept free of torch imports: the decision is made before any child starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import json
import logging
import os
import re
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Literal

logger = logging.getLogger(__name__)
PREFIX_ENV = "PYTHONPYCACHEPREFIX"
NO_WRITE_ENV = "PYTHONDONTWRITEBYTECODE"
FOLDER = "pycache"  # under the cache directory
SETTINGS: dict[str, bool | Literal["auto"]] = {"auto": "auto", "on": True, "off": False}  # command-line words
# what the children import before a task's first cycle can finish: the reference's preload (dynamo, the inductor
# and its Triton code generation), the fork server's warm-up (the profiler, standalone_compile) and what a
# single-file solution's load_inline needs; the harness modules come from their own folder
WARM_MODULES = (
    "torch",
    "torch._dynamo",
    "torch._inductor.compile_fx",
    "torch._inductor.codegen.triton",
    "torch._inductor.standalone_compile",
    "torch.profiler",
    "torch.utils._python_dispatch",
    "torch.utils.cpp_extension",
)
HARNESS_MODULES = tuple(
    f"cudagym.harness.{name}"
    for name in (
        "common",
        "timing",
        "compare",
        "gpulib",
        "handshake",
        "freezer",
        "cputime",
        "sampler",
        "clock",
        "stages",
        "shortcuts",
        "candidate",
        "compile_backend",
        "reference",
    )
)
# what ``fill`` compiles besides the standard library: the packages those imports come from (those installed)
FILL_PACKAGES = (
    "torch",
    "triton",
    "sympy",
    "mpmath",
    "networkx",
    "numpy",
    "jinja2",
    "markupsafe",
    "filelock",
    "fsspec",
    "typing_extensions",
    "torchgen",
    "functorch",
    "setuptools",  # torch.utils.cpp_extension's, for a single-file solution's load_inline
    "_distutils_hack",
    "packaging",
    "tqdm",
    "colorama",
)
# what no child imports: the standard library's tests, GUI and packaging tools and the packages installed beneath
# it (each compiled only if listed), and the test suites that packages ship
STDLIB_SKIP = ("site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip")
PACKAGE_SKIP = r"/(tests?|testing/_internal)/"
FILLED = ".filled"  # the marker ``fill`` leaves (with the interpreter's cache tag), once it has compiled everything


def folder(cache_dir: Path) -> Path:
    """Where the bytecode of a cache directory's children lives."""
    return cache_dir / FOLDER


def _torch_source() -> Path | None:
    """torch's ``__init__.py``, None where torch is not installed from sources."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


@functools.lru_cache(maxsize=1)
def installation_lacks_bytecode() -> bool:
    """Whether this interpreter's torch has no compiled bytecode beside its sources (``torch/__pycache__``), as in
    installations made without it; the other packages of such an installation are taken to lack it too."""
    source = _torch_source()
    if source is None:
        return False
    return not (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def _installation_writable() -> bool:
    """Whether this user may write torch's installation folder (a candidate could then change its sources)."""
    source = _torch_source()
    return source is not None and os.access(source.parent, os.W_OK)


def candidates_cannot_write(path: Path, readonly_filesystem: bool | str) -> tuple[bool, str]:
    """(whether candidate processes are kept from writing ``path``, and why or why not): their file system is
    read-only except their scratch folder, the exchange folder and the caches they must write."""
    from cudagym.sandbox import exchange_dir, isolation_status

    if readonly_filesystem is False:
        return False, "candidates' read-only file system is turned off (ChildLimits.readonly_filesystem)"
    status = isolation_status()
    if not (status.works("user") and status.works("readonly")):
        return False, f"no read-only file system for candidates here: {status.readonly or status.user}"
    exchange = Path(exchange_dir()).resolve()
    resolved = path.resolve()
    if resolved == exchange or exchange in resolved.parents:
        return False, f"{path} is under {exchange}, which candidates may write"
    return True, "candidates' file system is read-only there"


def resolve(setting: bool | Literal["auto"], cache_dir: Path, readonly_filesystem: bool | str = "auto") -> Path | None:
    """The bytecode folder the children of ``cache_dir`` use, or None for none (``Tuning.bytecode_cache``):
    True: always; False: never; "auto": where the installation holds no bytecode of its own and candidates cannot
    write the folder, or could write the installation anyway (see the module docstring)."""
    if setting is False:
        return None
    target = folder(cache_dir)
    if setting is True:
        return target
    if not installation_lacks_bytecode():
        return None
    if _installation_writable() or candidates_cannot_write(target, readonly_filesystem)[0]:
        return target
    return None


def child_env(path: Path | None) -> dict[str, str]:
    """The environment entries that point a child at the bytecode folder ``path`` (none for None)."""
    return {PREFIX_ENV: str(path)} if path is not None else {}


def launch(env: dict[str, str], *, writer: bool) -> tuple[list[str], dict[str, str]]:
    """(interpreter flags, environment) for a child started with ``env``: a trusted ``writer`` given a bytecode
    folder writes what it compiles there; every other child reads at most (``-B``, ``PYTHONDONTWRITEBYTECODE``)."""
    if writer and env.get(PREFIX_ENV):
        return [], {k: v for k, v in env.items() if k != NO_WRITE_ENV}
    return ["-B"], {**env, NO_WRITE_ENV: "1"}


def entries(path: Path) -> tuple[int, int]:
    """(bytecode files, their bytes) under ``path``."""
    count = size = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            if name.endswith(".pyc"):
                count += 1
                try:
                    size += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
    return count, size


def writer_env(path: Path) -> dict[str, str]:
    """This process's environment for a trusted process that writes the bytecode folder ``path``."""
    return launch({**os.environ, **child_env(path)}, writer=True)[1]


def _marker(path: Path) -> Path:
    return path / f"{FILLED}-{sys.implementation.cache_tag}"


def filled(path: Path) -> bool:
    """Whether a ``Filler`` has compiled everything into ``path`` for this interpreter."""
    return _marker(path).is_file()


def fill_sources(packages: tuple[str, ...] = FILL_PACKAGES) -> list[str]:
    """The folders and files a ``Filler`` compiles: the standard library and the installed ``packages``."""
    found = [sysconfig.get_path("stdlib")]
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            found += list(spec.submodule_search_locations)
        elif spec.origin and spec.origin.endswith(".py"):
            found.append(spec.origin)
    return found


# run by the filler's interpreter (standard library only): every .py of the plan's folders that no pattern excludes,
# compiled by a process per core (compileall.compile_file writes where PYTHONPYCACHEPREFIX points)
FILL_SCRIPT = """
import compileall, concurrent.futures, functools, json, os, re, sys
plan = json.loads(sys.argv[1])
files = []
for root, skip in plan:
    if os.path.isfile(root):
        files.append(root)
        continue
    pattern = re.compile(skip)
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not pattern.search(os.path.join(folder, d) + "/"))
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
with concurrent.futures.ProcessPoolExecutor() as pool:
    list(pool.map(functools.partial(compileall.compile_file, quiet=2), files, chunksize=32))
"""


def fill_plan(sources: list[str]) -> list[tuple[str, str]]:
    """(folder or file, the regular expression of the folders left out beneath it) for each of ``sources``."""
    stdlib = sysconfig.get_path("stdlib")
    plan = []
    for source in sources:
        if source == stdlib:
            plan.append((source, f"^{re.escape(stdlib)}/({'|'.join(STDLIB_SKIP)})/|{PACKAGE_SKIP}"))
        else:
            plan.append((source, PACKAGE_SKIP))
    return plan


class Filler:
    """Compiles the standard library and the packages the children import into a bytecode folder, on every core,
    in a trusted process of its own (``compileall``), once per folder and interpreter: the first evaluator on a
    folder that holds nothing starts it, so that its reference process, whose own imports run on one core, finds
    most modules compiled. One filler per folder at a time (a file lock); ``stop`` ends it."""

    def __init__(self, path: Path, packages: tuple[str, ...] = FILL_PACKAGES) -> None:
        self.path = path
        self.sources = fill_sources(packages)
        self.proc: subprocess.Popen[bytes] | None = None
        self.seconds: float | None = None  # how long the compile took, once done
        self.skipped = ""  # why it did not compile (done already, another process at it)
        self._stopped = False
        self._guard = threading.Lock()  # orders a start against a stop: a stop never misses a process starting

    def run(self, timeout: float = 600.0) -> float | None:
        """Compiles, unless done already or under way elsewhere (then ``skipped`` says so); returns the seconds.
        Never raises: a folder it cannot write or a compile that fails is reported in ``skipped``."""
        try:
            return self._run(timeout)
        except OSError as exc:
            self.skipped = f"{type(exc).__name__}: {exc}"
            logger.warning("compiling bytecode into %s failed (the children compile their imports): %s", self.path, exc)
            return None

    def _run(self, timeout: float) -> float | None:
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".fill.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self.skipped = "another process is filling this folder"
                return None
            if filled(self.path):
                self.skipped = "filled already"
                return None
            command = [sys.executable, "-c", FILL_SCRIPT, json.dumps(fill_plan(self.sources))]
            start = time.monotonic()
            with self._guard:
                if self._stopped:
                    return None
                self.proc = subprocess.Popen(
                    command,
                    env=writer_env(self.path),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.stop()
                self.skipped = f"the compile took longer than {timeout:.0f} s"
                logger.warning("compiling bytecode into %s stopped: %s", self.path, self.skipped)
                return None
            if self._stopped:
                return None
            # compileall says 1 when a file does not compile (some packages ship templates as .py): still done
            self.seconds = time.monotonic() - start
            _marker(self.path).write_text(f"{self.seconds:.2f}\n")
            return self.seconds

    def stop(self) -> None:
        """Ends a compile under way (its process group); the folder keeps what it wrote, unmarked."""
        with self._guard:
            self._stopped = True
            proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def warm(path: Path, modules: tuple[str, ...] = WARM_MODULES, timeout: float = 600.0) -> float:
    """Fills ``path`` with the bytecode of ``modules`` and of the harness, compiled by a fresh interpreter that
    imports them (as the reference process would the first time); returns its seconds. Raises RuntimeError when
    the interpreter fails. CUDA is not initialised."""
    path.mkdir(parents=True, exist_ok=True)
    code = (
        f"import importlib\nfor name in {list(modules) + list(HARNESS_MODULES)!r}:\n    importlib.import_module(name)\n"
    )
    env = {**writer_env(path), "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"warming the bytecode cache failed: {(done.stdout + done.stderr)[-2000:]}")
    return time.monotonic() - start


def build(
    path: Path, modules: tuple[str, ...] = WARM_MODULES, packages: tuple[str, ...] = FILL_PACKAGES
) -> tuple[Filler, float]:
    """Fills ``path`` as ``cudagym prepare`` does: the standard library and ``packages`` compiled on every core
    (``Filler``), then what the children import from elsewhere, by importing ``modules`` (``warm``). Returns the
    filler (its ``seconds`` or why it ``skipped``) and the imports' seconds; raises as ``warm`` does."""
    filler = Filler(path, packages)
    filler.run()
    return filler, warm(path, modules)
