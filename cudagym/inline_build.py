"""Building a single-file solution's ``load_inline``/``load`` extensions with cudagym's own cached builder.

KernelBench's format builds its kernels from ``model_new.py`` with ``torch.utils.cpp_extension.load_inline``. In a
candidate those calls become requests (``harness/inline_loader.py``, ``harness/inline_request.py``), which this module
builds in the trusted process, exactly as torch would lay them out (``main.cpp`` with ``torch/extension.h`` and the
pybind11 module of ``functions``, ``cuda.cu`` with torch's implicit headers, torch's flags), but with the workspace
builder's machinery (``cudagym.build.Builder``): every translation unit's object cached by content, ``main.cpp``
compiled against a precompiled ``torch/extension.h`` (built in the background the first time: the compile does not
wait for it), ccache, the compiler sandbox. The sources are written under the cache folder by this process alone, and
the library lands in the builder's content-keyed ``builds`` folder: what a call gets depends only on its sources and
flags, never on what another candidate left in a folder it could write.

A CUDA file is compiled the fastest way that means what it means, each tried only where the one before failed:

1. split in two (``BuildOptions.split_sources``, ``cudagym.kernel_split``): its kernels in ``split/<name>`` without
   torch's headers (nvcc, the file's own command), its host code in ``split/<stem>_host.cpp`` against a precompiled
   header of its leading includes (the C++ compiler, with the flags nvcc hands its host compiler). A kernel edit then
   recompiles the small device unit alone (nvcc, which has no precompiled headers, never parses torch). Where the
   file has template kernels, the host unit is compiled first and the device unit instantiates what its object uses
   (torch's scalar types among them: ``c10::Half`` and ``c10::BFloat16`` come from their own light headers);
2. as a copy (``light/<name>``) with ``torch/types.h`` in place of ``torch/extension.h``, where
   ``cudagym.light_headers``' guard finds that the copy cannot mean something else (``BuildOptions.light_headers``);
3. as written.

A way that fails to compile is remembered for that source (``<cache>/split/failed``, ``<cache>/light/failed``) and
the next is tried in the same build; the result of the way that compiled, or of the file as written, errors included,
is the one returned (the agent never sees the errors of a unit it did not write). Where a split's device unit fails
with nothing but errors the file as written has too (``cudagym.split_errors``: a missing ``;``, a name that neither
torch's headers nor the host code holds), those errors are the file's: they are returned in its name at once, without
the whole-file compiles that would only repeat them. A compile the timeout ended is returned as it is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from cudagym import kernel_split, light_headers, split_errors
from cudagym.build import KILLED_AFTER, Builder, CompileUnit, content_hash, nvcc_command, write_folder_once
from cudagym.errors import CudaGymError
from cudagym.harness.inline_request import MAX_REQUEST_CHARS, request_key
from cudagym.header_reads import HeaderReads, write_once
from cudagym.results import CompileResult, Stage, Status
from cudagym.text import clean
from cudagym.workspace import Workspace
from cudagym.workspace_headers import OutsideWorkspace, WorkspaceHeaders

logger = logging.getLogger(__name__)

SPLIT = "split in a device and a host unit"  # the label of that way of compiling a CUDA file (cudagym.kernel_split)
EXTENSION_HEADER = light_headers.EXTENSION_LINE  # the precompiled header of load_inline's main.cpp as written
# the flags torch's JIT builds .cu files with (torch.utils.cpp_extension.COMMON_NVCC_FLAGS)
TORCH_NVCC_FLAGS = (
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
)
SOURCE_KINDS = {".cu": "cu", ".cpp": "cxx", ".cc": "cxx", ".cxx": "cxx", ".c": "cxx"}
_SYMBOL_ERROR_RE = re.compile(r"undefined reference|multiple definition|undefined symbol|duplicate symbol")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
# flags that would change what the command writes or which programs it runs (the rest only steer the compile,
# which sees nothing but its sandbox's view)
_REFUSED_FLAG_RE = re.compile(r"^(-o|--output|-B|-wrapper|-fplugin|-specs|--specs|@|-ccbin|--compiler-bindir)")
_ARCH_FLAG_RE = re.compile(r"^(-arch|--gpu-architecture|-gencode|--generate-code)")


class RequestError(CudaGymError, ValueError):
    """A request that cannot be built as asked; the message is for the agent."""


@dataclasses.dataclass(frozen=True)
class InlineSources:
    """What torch would compile for one call: its files (name, text) and its flags, each flag one argument."""

    name: str
    files: tuple[tuple[str, str], ...]
    cflags: tuple[str, ...]
    cuda_cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    include_paths: tuple[str, ...]


def inline_sources(request: Any) -> InlineSources:
    """The files and flags of a request, laid out as torch's ``load_inline``/``load`` lays them out; raises
    RequestError for a request that is malformed or asks for what the builder does not do."""
    if not isinstance(request, dict) or request.get("loader") not in ("load_inline", "load"):
        raise RequestError("not a load_inline/load request")
    if len(repr(request)) > MAX_REQUEST_CHARS:
        raise RequestError(f"its sources and flags exceed {MAX_REQUEST_CHARS // 1024 // 1024} MiB")
    try:  # a lone surrogate (JSON carries one): torch's load_inline could not write such a file either
        json.dumps(request, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError):
        raise RequestError("its sources or flags hold characters that are not valid UTF-8") from None
    name = request.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise RequestError(f"name={name!r} is not a valid module name (letters, digits and _, at most 100)")
    if request["loader"] == "load_inline":
        files = _inline_files(request)
    else:
        files = _loaded_files(request.get("sources"))
    return InlineSources(
        name=name,
        files=files,
        cflags=_split_flags(request.get("extra_cflags"), "extra_cflags"),
        cuda_cflags=_split_flags(request.get("extra_cuda_cflags"), "extra_cuda_cflags"),
        ldflags=_split_flags(request.get("extra_ldflags"), "extra_ldflags"),
        include_paths=tuple(_strings(request.get("extra_include_paths"), "extra_include_paths")),
    )


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"{what} must be a list of strings")
    return value


def _split_flags(value: Any, what: str) -> tuple[str, ...]:
    """Each flag string split as a shell splits it (torch writes them into a ninja file), unsafe ones refused."""
    flags: list[str] = []
    for text in _strings(value, what):
        try:
            flags += shlex.split(text)
        except ValueError as exc:
            raise RequestError(f"{what}: cannot split {text!r}: {exc}") from None
    for flag in flags:
        # a flag handed on to another tool (-Xcompiler=..., -Wl,...) is judged by each of its parts too
        if any(_REFUSED_FLAG_RE.match(part) for part in (flag, *re.split(r"[=,]", flag))):
            raise RequestError(f"{what} passes {flag!r}, which the builder does not allow")
    return tuple(flags)


def _inline_files(request: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """``main.cpp`` and ``cuda.cu`` as torch's ``load_inline`` writes them."""
    cpp = _strings(request.get("cpp_sources"), "cpp_sources")
    cuda = _strings(request.get("cuda_sources"), "cuda_sources")
    implicit = not request.get("no_implicit_headers")
    cpp = (["#include <torch/extension.h>"] if implicit else []) + cpp
    functions = request.get("functions")
    if functions is not None:
        if not isinstance(functions, list) or not all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(x, str) for x in f) for f in functions
        ):
            raise RequestError("functions must be a list of names or a dict of name -> docstring")
        wrap = bool(request.get("with_pytorch_error_handling", True))
        cpp.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for function, doc in functions:
            target = f"torch::wrap_pybind_function({function})" if wrap else function
            cpp.append(f'm.def("{function}", {target}, "{doc}");')
        cpp.append("}")
    files = [("main.cpp", "\n".join(cpp))]
    if cuda:
        head = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"] if implicit else []
        files.append(("cuda.cu", "\n".join(head + cuda)))
    return tuple(files)


def _loaded_files(sources: Any) -> tuple[tuple[str, str], ...]:
    """``load``'s files (name, text) as the candidate read them; names made unique, kinds checked."""
    if not isinstance(sources, list) or not sources:
        raise RequestError("load needs at least one source file")
    files: list[tuple[str, str]] = []
    for index, entry in enumerate(sources):
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
            raise RequestError("load's sources must be files")
        name = os.path.basename(entry[0])
        if Path(name).suffix not in SOURCE_KINDS:
            raise RequestError(f"load: {name} is not a C/C++/CUDA source (.cpp, .cc, .cxx, .c, .cu)")
        files.append((f"{index}_{name}", entry[1]))
    return tuple(files)


@dataclasses.dataclass(frozen=True)
class _Way:
    """One way to compile a file of a request: its units, and the file that records that it failed for this source
    (None for the file as written, the last way)."""

    label: str
    units: tuple[CompileUnit, ...]
    marker: Path | None
    compiled_first: tuple[CompileUnit, ...] = ()  # its units compiled before the build (a template split's host)


def _has_include_paths(flags: Sequence[str]) -> bool:
    """Whether ``flags`` name an include path of the request's (``-I``; torch's and CUDA's are ``-isystem``)."""
    return any(flag.startswith("-I") for flag in flags)


def host_flags(cuda_cflags: Sequence[str]) -> list[str]:
    """The flags of a request's CUDA compile that nvcc applies to host code (macros, include paths, optimisation,
    debug information, the language standard, what ``-Xcompiler`` passes on), for the C++ compiler of a split file's
    host unit; torch's JIT macros first, ``-std=c++20`` where the request names no standard (as for its nvcc)."""
    flags = [f for f in TORCH_NVCC_FLAGS if f.startswith("-D")]
    given = list(cuda_cflags)
    i = 0
    while i < len(given):
        flag = given[i]
        if flag in ("-D", "-U", "-I", "-Xcompiler", "--compiler-options") and i + 1 < len(given):
            value = given[i + 1]
            flags += value.split(",") if flag in ("-Xcompiler", "--compiler-options") else [flag, value]
            i += 2
            continue
        if flag.startswith(("-Xcompiler=", "--compiler-options=")):
            flags += flag.split("=", 1)[1].split(",")
        elif flag.startswith(("-D", "-U", "-I", "-O", "-std=")) or flag == "-g":
            flags.append(flag)
        elif flag.startswith("--std="):
            flags.append(flag[1:])
        i += 1
    if not any(f.startswith("-std=") for f in flags):
        flags.append("-std=c++20")
    return flags


class InlineBuilder:
    """Builds load_inline/load requests with ``builder`` (its caches, header, ccache and sandbox)."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self.sources_dir = builder.cache_dir / "inline"
        self.reads = HeaderReads(builder)

    def build(self, request: Any, workspace: Workspace) -> tuple[str, CompileResult]:
        """(the request's key, its build): the library in ``artifact`` when it built, else the compiler's output."""
        start = time.monotonic()
        key = request_key(request) if isinstance(request, dict) else ""
        try:
            sources = inline_sources(request)
            if any(Path(name).suffix == ".cu" for name, _ in sources.files) and not self.builder.backend.is_cuda:
                raise RequestError("CUDA sources need the cuda backend; on the cpu backend pass cpp_sources only")
            view = WorkspaceHeaders.take(workspace, self.builder.cache_dir)
            includes = self._include_flags(sources, view)
        except RequestError as exc:
            message = f"{_call(request)}: {exc}"
            return key, CompileResult(
                stage=Stage.COMPILE, status=Status.COMPILE_ERROR, message=message, diagnostics=message
            )
        folder = self._write_sources(sources)
        units = [self._unit(folder / name, folder, view, sources, includes) for name, _ in sources.files]
        self._read_guards(units, sources, includes, view)
        # each file's ways to compile, the fastest first; a way whose units fail gives way to the next, the file as
        # written last (its result, errors included, is the one the agent sees). The C++ files' come first: a split
        # with template kernels compiles their first ways' units beside its host unit, before the build
        order = sorted(range(len(units)), key=lambda i: units[i].kind == "cu")
        ladders: dict[int, Iterator[_Way]] = {}
        opening: dict[int, _Way] = {}
        for i in order:
            beside = [u for way in opening.values() for u in way.units]
            split = self._split_way(units[i], folder, view, sources, includes, beside=beside)
            ladders[i] = self._ways(units[i], split, folder, view)
            opening[i] = next(ladders[i])
        ways = [opening[i] for i in range(len(units))]
        while True:
            chosen = [unit for way in ways for unit in way.units]
            result = self.builder.build_units(
                chosen, folder, start=start, name=sources.name, link_extra=sources.ldflags, readonly=[view.root]
            )
            # a compile the timeout ended says nothing of the source (and a slower way would take longer still): that
            # result stands, and the next build tries the same ways again
            if result.status is not Status.COMPILE_ERROR or KILLED_AFTER in result.diagnostics:
                break
            failed = [i for i, way in enumerate(ways) if way.marker is not None and not self._compiled(way)]
            own = self._split_errors(ways[failed[0]], result, view) if len(failed) == 1 else None
            if own is not None:
                result = own  # the whole file would say the same, only later
                break
            if not failed and _SYMBOL_ERROR_RE.search(result.diagnostics):
                # a link that found a symbol missing or defined twice: a split may be why (a header of device code
                # the host unit compiled as host code, say), so the file is linked whole before its own link decides
                failed = [i for i, way in enumerate(ways) if way.label == SPLIT]
            if not failed:
                break
            for i in failed:
                write_once(ways[i].marker, "", replace=True)  # not tried again for this source
                ways[i] = next(ladders[i])
                logger.info("%s: compiling %s %s", _call(request), units[i].source.name, ways[i].label)
        if first := [unit for way in ways for unit in way.compiled_first]:  # compiled in this build, if not by the rest
            paths = {str(folder): "", str(self.builder.cache_dir): "<cache>"}
            result = dataclasses.replace(
                result,
                objects_compiled=result.objects_compiled + len(first),
                objects_reused=max(0, result.objects_reused - len(first)),
                commands=(
                    *(clean(" ".join(unit.command), 2000, replace_paths=paths) for unit in first),
                    *result.commands,
                ),
            )
        logger.info("%s: %s in %.2f s (%s)", _call(request), result.status.value, result.seconds, result.message)
        return key, result

    def prepare_headers(self, request: dict[str, Any], workspace: Workspace) -> list[Path]:
        """Builds the precompiled headers a build of ``request`` would compile against (``main.cpp``'s and, where its
        CUDA file splits, its host unit's), under the builder's ``wait_for_pch``, and compiles nothing: what
        ``cudagym prepare`` makes for the requests of :func:`typical_requests`. Returns the headers that are ready."""
        sources = inline_sources(request)
        folder = self._write_sources(sources)
        view = WorkspaceHeaders.take(workspace, self.builder.cache_dir)
        headers = []
        for name, _ in sources.files:
            unit = self._unit(folder / name, folder, view, sources, [])
            split = self._split_way(unit, folder, view, sources, [])
            first = next(self._ways(unit, split, folder, view))  # the way a build would try first
            headers += [u.pch for u in first.units if u.pch is not None]
        return headers

    def _split_errors(self, way: _Way, result: CompileResult, view: WorkspaceHeaders) -> CompileResult | None:
        """``result`` told in the file's own name where ``way`` is a split whose host unit compiled and whose device
        unit failed with errors the file as written has too (``cudagym.split_errors``); else None (the file is
        compiled the next way)."""
        if way.label != SPLIT:
            return None
        device, host = way.units
        objects = self.builder.objects_dir
        if (objects / f"{device.key}.o").exists() or not (objects / f"{host.key}.o").exists():
            return None
        name = device.source.name
        try:
            texts = [
                path.read_text(encoding="utf-8", errors="surrogatepass")
                for path in (device.source, host.source, device.source.parent.parent / name)
            ]
        except OSError:
            return None
        device_text, host_text, source_text = texts
        diagnostics = split_errors.errors_of_the_file(
            result.diagnostics,
            name,
            device=device_text,
            host=host_text,
            source=source_text,
            torch_names=lambda: self.reads.torch_words(device.command, source_text, view),
        )
        return None if diagnostics is None else dataclasses.replace(result, diagnostics=diagnostics)

    def _compiled(self, way: _Way) -> bool:
        return all((self.builder.objects_dir / f"{unit.key}.o").exists() for unit in way.units)

    def _ways(self, unit: CompileUnit, split: _Way | None, folder: Path, view: WorkspaceHeaders) -> Iterator[_Way]:
        """How ``unit``'s file can be compiled, fastest first, each looked at only when the one before failed: ``split``
        in two (``cudagym.kernel_split``), against the light headers (``cudagym.light_headers``), as written (a
        binding file against the precompiled ``torch/extension.h``, whose build starts only if this way is reached)."""
        if split is not None:
            yield split
        if (light := self._light_way(unit, view)) is not None:
            yield light
        if unit.kind == "binding":
            text = unit.source.read_text(encoding="utf-8", errors="surrogatepass")
            source = unit.source

            def key(command: Sequence[str]) -> str:
                return self._keyed(source, "binding", list(command), folder, view).key

            unit = self._against_header(unit, EXTENSION_HEADER, text, key)
        yield _Way("as written", (unit,), None)

    def _include_flags(self, sources: InlineSources, view: WorkspaceHeaders) -> list[str]:
        """``-I`` flags of the request's include paths, each of which must lie inside the workspace: the same places
        in ``view``, the copy of the workspace's headers its compiles see."""
        try:
            return [view.include_flag(path) for path in sources.include_paths]
        except OutsideWorkspace as exc:
            raise RequestError(f"extra_include_paths: {exc}") from None

    def _write_sources(self, sources: InlineSources) -> Path:
        """The request's files in a folder named by their content, written once by this process."""
        folder = self.sources_dir / content_hash(*(f"{n}\0{t}" for n, t in sources.files))[:24]
        files = [(name, text.encode("utf-8", errors="surrogatepass")) for name, text in sources.files]
        return write_folder_once(folder, files)

    def _unit(
        self,
        source: Path,
        folder: Path,
        view: WorkspaceHeaders,
        sources: InlineSources,
        includes: list[str],
    ) -> CompileUnit:
        """The compile of one file with torch's JIT flags (the workspace's headers are part of its key)."""
        builder, toolchain = self.builder, self.builder.toolchain
        common = self._common_flags(sources, includes)
        if SOURCE_KINDS[source.suffix] == "cu":
            arch = [] if any(_ARCH_FLAG_RE.match(f) for f in sources.cuda_cflags) else [f"-arch={builder.backend.arch}"]
            std = [] if any(f.startswith("-std=") for f in sources.cuda_cflags) else ["-std=c++20"]
            flags = [*common, *TORCH_NVCC_FLAGS, *sources.cuda_cflags, *std]
            command = nvcc_command(str(toolchain.nvcc), arch, flags, source)
            return self._keyed(source, "cu", command, folder, view)
        flags = [*common, "-fPIC", "-std=c++20", *sources.cflags]
        command = [toolchain.cxx, *flags, "-fdiagnostics-color=never", "-c", str(source)]
        return self._keyed(source, "binding", command, folder, view)

    def _against_header(
        self, unit: CompileUnit, header: str, text: str, key: Callable[[Sequence[str]], str]
    ) -> CompileUnit:
        """The binding ``unit`` (whose file's ``text`` begins with ``header``) compiled against the precompiled
        ``header`` of its flags (the module's name does not change it, so one header serves every request): built in
        the background the first time, the compile going on without it meanwhile. ``unit`` itself where its object is
        cached (compiled without the header, it serves just as well), where the file does not begin with the header
        (the header would add declarations the file does not include: no_implicit_headers, load) or where the request
        names include paths (the header is built where the workspace is not visible, so it could hold other files
        than the compile would find). ``key`` keys a command of the unit's."""
        objects = self.builder.objects_dir
        command = list(unit.command)
        header_flags = [f for f in command[1:-3] if not f.startswith("-DTORCH_EXTENSION_NAME=")]
        if not text.startswith(header) or _has_include_paths(header_flags) or (objects / f"{unit.key}.o").exists():
            return unit
        pch = self.builder.precompiled_header(header, header_flags, wait=self.builder.options.wait_for_pch)
        if pch is None:
            return unit
        command = [*command[:-2], "-include", str(pch), "-Winvalid-pch", *command[-2:]]
        return dataclasses.replace(unit, command=tuple(command), key=key(command), pch=pch)

    def _common_flags(self, sources: InlineSources, includes: list[str]) -> list[str]:
        """The flags every file of a request is compiled with: the module's name, the include paths, torch's."""
        toolchain = self.builder.toolchain
        common = [f"-DTORCH_EXTENSION_NAME={sources.name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *includes]
        system = [*toolchain.torch_includes, toolchain.python_include]
        if self.builder.backend.is_cuda and toolchain.cuda_home:
            system.append(str(Path(toolchain.cuda_home) / "include"))
        for include in system:
            common += ["-isystem", include]
        return common

    def _split_way(
        self,
        unit: CompileUnit,
        folder: Path,
        view: WorkspaceHeaders,
        sources: InlineSources,
        includes: list[str],
        beside: Sequence[CompileUnit] = (),
    ) -> _Way | None:
        """``unit``'s CUDA file as a device unit (``split/<name>``, nvcc, the file's command) and a host unit
        (``split/<stem>_host.cpp``, the C++ compiler against a precompiled header of its leading includes); None where
        ``cudagym.kernel_split`` refuses the file, where its split failed to compile before, or where the file's own
        object is cached already. A file with template kernels has its host unit compiled here, first (the device
        unit instantiates what the host object uses), with the C++ files of ``beside`` (the request's other units)
        whose objects are not cached, which the build then finds compiled."""
        if unit.kind != "cu" or not self.builder.options.split_sources:
            return None
        marker = self._split_marker(unit)
        if marker.exists() or (self.builder.objects_dir / f"{unit.key}.o").exists():
            return None
        text = unit.source.read_text(encoding="utf-8", errors="surrogatepass")
        tag = content_hash(unit.source.name)[:8]
        try:
            parts = kernel_split.split(text, tag)
        except kernel_split.Refused as exc:
            logger.info("%s compiles whole: %s", unit.source.name, exc)
            return None
        except Exception:  # a fault of the splitter never fails a build: the file compiles whole
            logger.warning("splitting %s failed; it compiles whole", unit.source.name, exc_info=True)
            return None
        device_path = unit.source.parent / "split" / unit.source.name
        host_path, host_command = self._host_command(unit, sources, includes)
        host_text = self._lighter_host(parts.host, host_command, view)
        write_once(host_path, host_text, replace=True)
        flags = self._host_flags(sources, includes)
        base = [self.builder.toolchain.cxx, *flags, "-fdiagnostics-color=never"]
        host = self._keyed(host_path, "cxx", host_command, folder, view)
        prefix = kernel_split.leading_includes(host_text)
        header_flags = [f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME=")]
        # a header built where the workspace is not visible (the compiler sandbox shows it none) must not depend on
        # it: with include paths of the request's, a leading <...> may name one of its files (the header would fail,
        # or hold a system copy of the same name whose guard then hides the workspace's), so the unit goes without
        if (
            prefix
            and not _has_include_paths(header_flags)
            and not (self.builder.objects_dir / f"{host.key}.o").exists()
        ):
            header = f"#include <cuda_runtime.h>\n{prefix}"
            pch = self.builder.precompiled_header(header, header_flags, wait=self.builder.options.wait_for_pch)
            if pch is not None:
                command = [*base, "-include", str(pch), "-Winvalid-pch", "-c", str(host_path)]
                host = dataclasses.replace(self._keyed(host_path, "cxx", command, folder, view), pch=pch)
        host = dataclasses.replace(host, quiet=True)
        first: tuple[CompileUnit, ...] = ()
        ending: kernel_split.Instances | None = kernel_split.Instances()
        if parts.templates:
            # the host unit compiles first, beside the request's C++ files that are not cached (main.cpp): not after
            objects = self.builder.objects_dir
            todo = [u for u in (host, *(u for u in beside if u.kind != "cu")) if not (objects / f"{u.key}.o").exists()]
            if todo:
                outputs = self.builder._compile_all(todo, folder, [view.root])
                first = tuple(u for u, (code, _) in zip(todo, outputs, strict=True) if code == 0)
                if any(u is host and KILLED_AFTER in out for u, (_, out) in zip(todo, outputs, strict=True)):
                    return None  # the timeout ended it: that says nothing of the split, which the next build tries
            ending = self._template_instances(host, parts, tag) if host in first or not todo else None
        if ending is None:
            write_once(marker, "", replace=True)
            return None
        write_once(device_path, parts.device + ending.text, replace=True)
        # the light headers of torch's scalar types its instances name, included before its first line
        headers = [flag for header in ending.headers for flag in ("-include", header)]
        device = self._keyed(device_path, "cu", [*unit.command[:-1], *headers, str(device_path)], folder, view)
        return _Way(SPLIT, (dataclasses.replace(device, quiet=True), host), marker, compiled_first=first)

    def _host_command(self, unit: CompileUnit, sources: InlineSources, includes: list[str]) -> tuple[Path, list[str]]:
        """(the path of the CUDA file ``unit``'s host unit when split, the C++ compiler's command for it)."""
        path = unit.source.parent / "split" / f"{unit.source.stem}_host.cpp"
        flags = self._host_flags(sources, includes)
        # nvcc includes cuda_runtime.h before a file's host code: so does the host unit, or its header
        command = [self.builder.toolchain.cxx, *flags, "-fdiagnostics-color=never", "-include", "cuda_runtime.h"]
        return path, [*command, "-c", str(path)]

    def _host_flags(self, sources: InlineSources, includes: list[str]) -> list[str]:
        """The C++ compiler's flags for a request's split host units (those nvcc would give their host code)."""
        return [*self._common_flags(sources, includes), "-fPIC", *host_flags(sources.cuda_cflags)]

    def _lighter_host(self, host: str, command: Sequence[str], view: WorkspaceHeaders) -> str:
        """A split file's host code, with ``torch/types.h`` in place of the heavy torch headers where the guard
        finds that this cannot change what it means for the host unit's ``command`` (``cudagym.light_headers``);
        else as the split made it."""
        if not self.builder.options.light_headers or (light := light_headers.lighter(host)) is None:
            return host
        why = "a host unit keeps torch's heavy headers"
        return light if self._guard_allows(host, command, light_headers.PROBE, view, why) else host

    def _guard_allows(
        self,
        text: str,
        command: Sequence[str],
        probe: light_headers.Probe,
        view: WorkspaceHeaders,
        refusal: str,
    ) -> bool:
        """Whether ``probe``'s light headers cannot change what ``text`` means, compiled by ``command``
        (``HeavyOnly.blocks``); a refusal is logged as ``refusal``, with its reason. False where the guard could not
        be read."""
        additions = self.reads.heavy_only(command, probe, view)
        if additions is None:
            return False
        if reason := additions.blocks(text):
            logger.info("%s: %s", refusal, reason)
            return False
        return True

    def _template_instances(
        self, host: CompileUnit, parts: kernel_split.Split, tag: str
    ) -> kernel_split.Instances | None:
        """What a device unit with template kernels needs: the instances of their launchers that the host unit uses
        (``kernel_split.instances``), read from its object; None where the host unit failed to compile or an instance
        cannot be spelt in the device unit (the file is then compiled the next way)."""
        obj = self.builder.objects_dir / f"{host.key}.o"
        if not obj.exists():
            logger.info("%s: the host unit failed to compile; the file compiles whole", host.source.name)
            return None
        try:
            listed = subprocess.run(
                ["nm", "-C", "--undefined-only", str(obj)], capture_output=True, text=True, timeout=60, check=True
            ).stdout
            return kernel_split.instances(listed.splitlines(), tag, parts.templates)
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("the host unit's symbols could not be read (%s); the file compiles whole", exc)
        except kernel_split.Refused as exc:
            logger.info("%s compiles whole: %s", host.source.name, exc)
        return None

    def _light_way(self, unit: CompileUnit, view: WorkspaceHeaders) -> _Way | None:
        """The compile of ``unit``'s file against lighter headers than torch's heavy ones (``cudagym.light_headers``):
        a CUDA file against ``torch/types.h``, a binding file (``main.cpp``) against pybind11's and torch's
        bindings' headers beside it (and their precompiled header, once built); its copy ``light/<name>`` beside it,
        the same command and flags. None where there is no such copy, where it could mean something else than the
        file, where it failed to compile before, or where the file's own object is cached already (the light one
        would only cost a compile)."""
        if unit.kind not in ("cu", "binding") or not self.builder.options.light_headers:
            return None
        binding = unit.kind == "binding"
        text = unit.source.read_text(encoding="utf-8", errors="surrogatepass")
        light_text = light_headers.lighter_binding(text) if binding else light_headers.lighter(text)
        if light_text is None:
            return None
        path = unit.source.parent / "light" / unit.source.name

        def key(command: Sequence[str]) -> str:  # of the copy's text, which is not written yet
            return self._key(command, unit.source.parent, view, light_text.encode())

        command = [*unit.command[:-1], str(path)]
        light = CompileUnit(path, unit.kind, tuple(command), key(command))
        objects = self.builder.objects_dir
        if not (objects / f"{light.key}.o").exists():
            if (objects / f"{unit.key}.o").exists() or self._heavy_marker(light).exists():
                return None
            probe = light_headers.BINDING_PROBE if binding else light_headers.PROBE
            why = f"{unit.source.name} compiles as written"
            if not self._guard_allows(text, unit.command, probe, view, why):
                return None
        write_once(path, light_text)
        marker = self._heavy_marker(light)  # of the copy, whether its compile has the precompiled header or not
        if binding:
            light = self._against_header(light, light_headers.BINDING_INCLUDES, light_text, key)
        return _Way("against the light header", (light,), marker)

    def _split_marker(self, unit: CompileUnit) -> Path:
        """The file that says the split of ``unit``'s CUDA file failed to compile (it then compiles whole)."""
        return self.builder.cache_dir / "split" / "failed" / unit.key

    def _heavy_marker(self, light: CompileUnit) -> Path:
        """The file that says ``light``'s compile failed (the source needs the heavy headers, or is broken)."""
        return self.builder.cache_dir / "light" / "failed" / light.key

    def _read_guards(
        self,
        units: Sequence[CompileUnit],
        sources: InlineSources,
        includes: list[str],
        view: WorkspaceHeaders,
    ) -> None:
        """Reads side by side the guards that ``units``' first ways will ask for (``HeaderReads.heavy_only``: a
        binding file's, a split file's host unit's), each a preprocessor run of torch's headers, where no object of
        the file is cached: on a new cache they come before every compile."""
        if not self.builder.options.light_headers:
            return
        asks: list[tuple[Sequence[str], light_headers.Probe]] = []
        for unit in units:
            if (self.builder.objects_dir / f"{unit.key}.o").exists():
                continue
            text = unit.source.read_text(encoding="utf-8", errors="surrogatepass")
            if unit.kind == "binding" and light_headers.lighter_binding(text) is not None:
                asks.append((unit.command, light_headers.BINDING_PROBE))
            elif (
                unit.kind == "cu"
                and self.builder.options.split_sources
                and not self._split_marker(unit).exists()
                and light_headers.lighter(text) is not None
            ):
                asks.append((self._host_command(unit, sources, includes)[1], light_headers.PROBE))
        self.reads.side_by_side(asks, view)

    def _keyed(self, source: Path, kind: str, command: list[str], folder: Path, view: WorkspaceHeaders) -> CompileUnit:
        """The unit of ``command``, keyed by its toolchain, backend, portable command, source and the workspace's
        headers (the same files give the same object wherever they lie)."""
        return CompileUnit(source, kind, tuple(command), self._key(command, folder, view, source.read_bytes()))

    def _key(self, command: Sequence[str], folder: Path, view: WorkspaceHeaders, content: bytes) -> str:
        """The key of a compile: ``command`` with the request's ``folder`` and the workspace's path left out, the
        toolchain, the backend, the source's ``content`` and the workspace's headers."""
        backend, toolchain = self.builder.backend, self.builder.toolchain
        portable = [view.portable(c.replace(str(folder), "<src>")) for c in command]
        key = content_hash(toolchain.torch_version, backend.name, backend.arch, *portable, content)
        return content_hash(key, view.digest)


# a single file in the shape of KernelBench's prompt example: its CUDA source begins with these includes, its wrapper is
# bound through ``functions``; most single-file solutions keep that head
_TYPICAL_CUDA = """#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_kernel(const float* x, float* y, float factor, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * factor;
}

torch::Tensor scale_cuda(torch::Tensor x, double factor) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)factor, n);
    return y;
}
"""
_TYPICAL_CPP = """#include <torch/extension.h>

torch::Tensor scale_cpu(torch::Tensor x, double factor) { return x * factor; }
"""


def typical_requests(cuda: bool) -> list[dict[str, Any]]:
    """Requests shaped like most single-file solutions' (KernelBench's prompt example): on cuda, a kernel and its
    wrapper in ``cuda_sources`` with no CUDA flags and with ``-O3``; on cpu, a wrapper in ``cpp_sources``."""
    base: dict[str, Any] = {
        "loader": "load_inline",
        "name": "cudagym_typical",
        "functions": [["scale_cuda" if cuda else "scale_cpu", ""]],
        "with_pytorch_error_handling": True,
        "no_implicit_headers": False,
        "extra_cflags": [],
        "extra_ldflags": [],
        "extra_include_paths": [],
        "with_cuda": cuda,
    }
    if not cuda:
        return [{**base, "cpp_sources": [_TYPICAL_CPP], "cuda_sources": [], "extra_cuda_cflags": []}]
    declaration = "torch::Tensor scale_cuda(torch::Tensor x, double factor);"
    return [
        {**base, "cpp_sources": [declaration], "cuda_sources": [_TYPICAL_CUDA], "extra_cuda_cflags": flags}
        for flags in ([], ["-O3"])
    ]


def _call(request: Any) -> str:
    """``load_inline(name='x')``: how the agent's call is named in messages."""
    if isinstance(request, dict):
        return f"{request.get('loader', 'load_inline')}(name={str(request.get('name'))[:100]!r})"
    return "load_inline"
