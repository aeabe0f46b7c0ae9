"""``cudagym prepare``: what a machine's first cycle would otherwise build, made ahead of time.

Four things are made once per installation and cache directory and shared by every evaluator after: the
precompiled header of the binding headers (about 20 s; a first ``compile`` that finds it missing compiles without it
while it is built in the background, which is slower than compiling against it), the precompiled headers of a
single-file solution's usual ``load_inline`` request (``main.cpp``'s binding headers; on cuda, the split host unit's
includes, ``torch/types.h`` among them, with and without ``-O3``: ``cudagym.inline_build.typical_requests``), the
trusted clock's GPU library (cuda; a second or two) and, where the Python installation holds no bytecode,
the children's bytecode cache (``cudagym/bytecode.py``; about 11 s of one core on the H200 machine, which the
reference process's imports would otherwise pay). Run it where an image is built or a machine is set up, with the
cache directory the environments will use; a part that is there already is reported as such and not built again.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from cudagym import bytecode
from cudagym.backends import Backend, find_toolchain, resolve_backend
from cudagym.build import Builder, default_cache_dir
from cudagym.eval_config import EvalConfig, resolve_bytecode, resolve_timing
from cudagym.harness import gpulib
from cudagym.inline_build import InlineBuilder, typical_requests
from cudagym.tasks import load
from cudagym.tuning import Tuning
from cudagym.workspace import Workspace

_TASK = "builtin/relu"  # a task whose workspace the single-file headers are prepared in (its files are not read)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """One part of the preparation: what it is, where it lives, whether it was made now, and in how long."""

    part: str
    status: str  # "built", "present", "skipped" or "failed"
    seconds: float = 0.0
    path: str = ""
    detail: str = ""


def _header(builder: Builder) -> Prepared:
    start = time.monotonic()
    if not builder.options.use_pch:
        return Prepared("precompiled header", "skipped", detail="BuildOptions.use_pch is off")
    before = set((builder.cache_dir / "pch").rglob("*.gch"))
    header = builder.precompiled_header()
    seconds = time.monotonic() - start
    if header is None:
        return Prepared("precompiled header", "failed", seconds, detail="the compiler could not build it")
    built = set((builder.cache_dir / "pch").rglob("*.gch")) - before
    return Prepared("precompiled header", "built" if built else "present", seconds, str(header))


def single_file_headers(builder: Builder) -> Prepared:
    """The precompiled headers of single-file solutions' usual request (``inline_build.typical_requests``):
    ``main.cpp``'s binding headers and, on cuda, the split host unit's includes, with and without ``-O3`` (the
    headers a build of such a request compiles against first: ``InlineBuilder.prepare_headers``)."""
    start = time.monotonic()
    part = "single-file headers"
    if not builder.options.use_pch:
        return Prepared(part, "skipped", detail="BuildOptions.use_pch is off")
    before = set((builder.cache_dir / "pch").rglob("*.gch"))
    waiting = Builder(
        builder.backend, cache_dir=builder.cache_dir, options=dataclasses.replace(builder.options, wait_for_pch=True)
    )
    inline = InlineBuilder(waiting)
    expected, headers = 0, []
    with tempfile.TemporaryDirectory(prefix="cudagym-prepare-") as tmp:
        workspace = Workspace(
            load("builtin").get(_TASK).source_for(builder.backend.name), "prepare", root_dir=Path(tmp)
        )
        for request in typical_requests(builder.backend.is_cuda):
            expected += 2 if builder.backend.is_cuda else 1
            headers += inline.prepare_headers(request, workspace)
    seconds = time.monotonic() - start
    unique = sorted({str(h) for h in headers})
    if len(headers) < expected:
        return Prepared(part, "failed", seconds, ", ".join(unique), f"{len(headers)} of {expected} built")
    built = set((builder.cache_dir / "pch").rglob("*.gch")) - before
    return Prepared(part, "built" if built else "present", seconds, ", ".join(unique), f"{len(unique)} headers")


def _gpu_library(backend: Backend, config: EvalConfig, cache_dir: Path) -> Prepared:
    if not backend.is_cuda:
        return Prepared("GPU library", "skipped", detail="the cpu backend times without it")
    existed = (cache_dir / "gpulib" / gpulib.library_name(backend.arch)).exists()
    start = time.monotonic()
    try:
        timing = resolve_timing(config.timing, backend, cache_dir, find_toolchain().nvcc)
    except RuntimeError as exc:
        return Prepared("GPU library", "failed", time.monotonic() - start, detail=str(exc)[:300])
    seconds = time.monotonic() - start
    return Prepared("GPU library", "present" if existed else "built", seconds, timing.gpu_library)


def _bytecode(config: EvalConfig, cache_dir: Path, modules: tuple[str, ...], packages: tuple[str, ...]) -> Prepared:
    folder = resolve_bytecode(config, cache_dir)
    if folder is None:
        off = config.tuning.bytecode_cache is False
        why = "turned off" if off else "the installation's own bytecode serves the children"
        return Prepared("bytecode cache", "skipped", detail=why)
    before, _ = bytecode.entries(folder)
    try:
        filler, seconds = bytecode.build(folder, modules, packages)
    except (RuntimeError, OSError) as exc:
        return Prepared("bytecode cache", "failed", path=str(folder), detail=str(exc)[-500:])
    count, size = bytecode.entries(folder)
    compiled = f"compiled in {filler.seconds:.1f} s" if filler.seconds is not None else filler.skipped
    detail = f"{count} files, {size / 2**20:.0f} MiB ({compiled}; imports {seconds:.1f} s)"
    seconds += filler.seconds or 0.0
    return Prepared("bytecode cache", "built" if count > before else "present", seconds, str(folder), detail)


def prepare(
    backend: Backend,
    *,
    cache_dir: Path | None = None,
    config: EvalConfig | None = None,
    modules: tuple[str, ...] = bytecode.WARM_MODULES,
    packages: tuple[str, ...] = bytecode.FILL_PACKAGES,
) -> list[Prepared]:
    """Makes the precompiled header, the GPU library (cuda) and the bytecode cache (where it is on: the standard
    library and ``packages`` compiled on every core, then ``modules`` imported) in ``cache_dir`` (default: the
    usual cache directory); returns what each part came to. Never raises for a part that fails: its entry says so."""
    config = config or EvalConfig()
    cache_dir = cache_dir or default_cache_dir()
    builder = Builder(backend, cache_dir=cache_dir, options=config.build)
    return [
        _header(builder),
        single_file_headers(builder),
        _gpu_library(backend, config, cache_dir),
        _bytecode(config, cache_dir, modules, packages),
    ]


def format_report(parts: list[Prepared]) -> str:
    """A Markdown table of the parts."""
    rows = ["| part | status | seconds | where | detail |", "|---|---|---|---|---|"]
    rows += [f"| {p.part} | {p.status} | {p.seconds:.2f} | {p.path} | {p.detail} |" for p in parts]
    return "\n".join(rows)


def _prepare_command(args: argparse.Namespace) -> int:
    config = EvalConfig(tuning=Tuning(bytecode_cache=bytecode.SETTINGS[args.bytecode_cache]))
    cache_dir = Path(args.cache_dir) if args.cache_dir else None
    parts = prepare(resolve_backend(args.backend), cache_dir=cache_dir, config=config)
    print(format_report(parts))
    return 1 if any(p.status == "failed" for p in parts) else 0


def add_prepare_command(sub: Any) -> None:
    """Adds ``cudagym prepare`` to the CLI's subcommands."""
    command = sub.add_parser("prepare", help="build the precompiled header, the GPU library and the bytecode cache")
    command.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    command.add_argument("--cache-dir", help="the cache the environments will use (default: the usual one)")
    command.add_argument(
        "--bytecode-cache",
        default="auto",
        choices=tuple(bytecode.SETTINGS),
        help="Tuning.bytecode_cache (auto: where the installation holds no bytecode)",
    )
    command.set_defaults(func=_prepare_command)
