"""What a failed candidate process said, made short for the agent: tracebacks, torch's C++ errors, CUDA faults.

A failing candidate leaves evidence written for a person at a terminal, not for an agent that reads every byte: Python
tracebacks that run through the harness and torch's modules, torch's C++ errors followed by dozens of
``frame #25: <unknown function> + 0x2a1ca`` lines and advice the agent cannot follow (``CUDA_LAUNCH_BLOCKING=1``),
warnings of the harness's own profiler, and a device-side assert printed once for every thread that failed it.
:func:`condense` keeps what the agent can act on: the error, the frames in its own files (and a few C++ frames of its
own extension), its own prints and warnings, and each repeat once with a count; what it leaves out it says it left out.
:func:`find_cuda_fault` names a CUDA fault in such text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from cudagym.harness.common import CUDA_ERROR_NAMES
from cudagym.results import CudaFault
from cudagym.text import cut

# how torch, the runtime and the driver say that the device ran out of memory ("OutOfMemoryError: CUDA out of memory.
# Tried to allocate ...", "CUDA error: out of memory", "CUDA_ERROR_OUT_OF_MEMORY")
DEVICE_OUT_OF_MEMORY = ("OutOfMemoryError", "out of memory", "CUDA_ERROR_OUT_OF_MEMORY")


def says_out_of_memory(text: str) -> bool:
    """Whether an error's ``text`` says that the device ran out of memory: the machine's shortage (a pool retries the
    job, synthesis drops the task as too large), not a fault of the code that ran."""
    return any(mark in text for mark in DEVICE_OUT_OF_MEMORY)


# -- warnings of the harness's own machinery ----------------------------------------------------------------------

# Python's warning lines: "<file>:<line>: <Category>: <message>", then the source line, indented, when it is known
_WARNING_RE = re.compile(r"^(?P<file>\S.*?):(?P<line>\d+): (?P<category>\w*Warning): (?P<message>.*)$")
# files whose warnings come from what the harness runs in the candidate process (the profiler's set-up and tear-down),
# never from the agent's code: the harness (shown as <harness>/) and torch's profiler
_HARNESS_WARNING_FILE_RE = re.compile(r"(^<harness>|/cudagym/harness/|/torch/profiler/|/torch/autograd/profiler)")
# messages of those, wherever a warning names its place
HARNESS_WARNING_MESSAGES = (
    "Profiler clears events at the end of each cycle",
    "CUDA is not available, disabling CUDA profiling",
)
# c10's log lines ("[W1203 10:45:51.062068583 Module.cpp:206] ...") from sources that only the profiler and the
# symbolising of C++ stacks write to, and Kineto's (the profiler's) own log lines ("USDT:2026-12-03 ... profiler_start")
_C10_LOG_RE = re.compile(r"^\[[WIE](?:\d{4} [\d:.]+ )?(?:\d+ )?(?P<source>[\w.]+):\d+\] ")
_KINETO_LOG_RE = re.compile(r"^(?:STAGE|USDT):\d{4}-\d\d-\d\d [\d:.]+ \d+:\d+ \w+\.cpp:\d+\] ")
_PROFILER_LOG_SOURCES = frozenset(
    {
        "Module.cpp",  # "symbolizing C++ stack trace for exception; if this hangs, ..."
        "kineto_shim.cpp",
        "profiler_kineto.cpp",
        "CuptiActivityProfiler.cpp",
        "ActivityProfilerController.cpp",
        "CuptiCallbackApi.cpp",
    }
)


def _is_harness_warning(match: re.Match[str]) -> bool:
    file, message = match.group("file"), match.group("message")
    return bool(_HARNESS_WARNING_FILE_RE.search(file)) or any(m in message for m in HARNESS_WARNING_MESSAGES)


def strip_harness_warnings(lines: list[str]) -> list[str]:
    """``lines`` without the warnings and log lines of the harness's own machinery (see the module docstring); the
    candidate's own warnings, and torch's warnings about what the candidate's code did, stay."""
    kept: list[str] = []
    skip_source = False
    for line in lines:
        if skip_source and line.startswith("  "):  # the source line Python prints under a warning
            skip_source = False
            continue
        skip_source = False
        warning = _WARNING_RE.match(line)
        if warning is not None and _is_harness_warning(warning):
            skip_source = True
            continue
        log = _C10_LOG_RE.match(line)
        if (log is not None and log.group("source") in _PROFILER_LOG_SOURCES) or _KINETO_LOG_RE.match(line):
            continue
        if any(m in line for m in HARNESS_WARNING_MESSAGES):
            continue
        kept.append(line)
    return kept


# -- Python tracebacks ---------------------------------------------------------------------------------------------

# a frame of a traceback ("File "x", line 3, in f") or of faulthandler's dump ("File "x", line 3 in f")
_PY_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>.*)$')
_CARET_RE = re.compile(r"^\s*[~^]+\s*$")
_LIBRARY_DIR_RE = re.compile(r"^.*?/(?:site|dist)-packages/|^.*?/lib/python3\.\d+/")


def is_own_python_file(file: str) -> bool:
    """Whether a traceback's file is the agent's (``model_new.py``, shown relative to the workspace) rather than the
    harness's, the standard library's or an installed package's."""
    return not (
        file.startswith(("<harness>", "<frozen", "<string>"))
        or "/cudagym/harness/" in file
        or _LIBRARY_DIR_RE.match(file) is not None
    )


def short_library_path(file: str) -> str:
    """An installed module's path from its package down (``torch/nn/modules/module.py``), not the installation's."""
    return _LIBRARY_DIR_RE.sub("", file, count=1)


# the installation's part of a path anywhere in a line ("/usr/lib/python3.11/site-packages/torch/include/...")
_INSTALL_PREFIX_RE = re.compile(r"(?<![\w.-])/[^\s:'\"()]*?/(?:site|dist)-packages/")


def hide_install_paths(text: str) -> str:
    """``text`` with every path into the Python installation's packages shortened to the package's own part
    (``torch/include/ATen/core/TensorBody.h``): the installation's folders say nothing to the agent."""
    return _INSTALL_PREFIX_RE.sub("", text)


def _condense_frames(lines: list[str]) -> list[str]:
    """Python frames outside the agent's files left out (a count in their place); the innermost frame always kept,
    where the error was raised, with its path shortened; caret lines dropped."""
    frame_starts = [i for i, line in enumerate(lines) if _PY_FRAME_RE.match(line)]
    if not frame_starts:
        return lines
    # the innermost frame of each traceback (the last frame before a line that is neither a frame nor its source)
    innermost = {
        start
        for n, start in enumerate(frame_starts)
        if n + 1 == len(frame_starts)
        or any(not _belongs_to_frame(line) for line in lines[start + 1 : frame_starts[n + 1]])
    }
    out: list[str] = []
    hidden = 0
    keep_body = True
    for i, line in enumerate(lines):
        frame = _PY_FRAME_RE.match(line)
        if frame is not None:
            file = frame.group("file")
            keep_body = is_own_python_file(file) or (i in innermost and not file.startswith("<harness>"))
            if not keep_body:
                hidden += 1
                continue
            if hidden:
                out.append(f"  [{hidden} frame{'s' if hidden > 1 else ''} of the harness and libraries]")
                hidden = 0
            out.append(line.replace(file, short_library_path(file)))
            continue
        if _belongs_to_frame(line) and i > 0 and (not keep_body or _CARET_RE.match(line)):
            continue
        if hidden:
            out.append(f"  [{hidden} frame{'s' if hidden > 1 else ''} of the harness and libraries]")
            hidden = 0
        keep_body = True
        out.append(line)
    if hidden:
        out.append(f"  [{hidden} frame{'s' if hidden > 1 else ''} of the harness and libraries]")
    return out


def _belongs_to_frame(line: str) -> bool:
    """A frame's source line or caret line (indented deeper than the frame line)."""
    return line.startswith("    ") and not _PY_FRAME_RE.match(line)


# faulthandler's notes that say nothing to the agent
_FAULTHANDLER_NOISE_RE = re.compile(r"^(Extension modules: .*|Thread 0x[0-9a-f]+ \(most recent call first\):)$")


# -- torch's C++ errors ------------------------------------------------------------------------------------------

_RAISED_FROM_RE = re.compile(r"^Exception raised from (?P<func>.+?) at (?P<file>\S+?):(?P<line>\d+) \(most recent")
# "frame #3: relu_forward(at::Tensor) + 0x5c (0x7f00 in /x/cuda_extension.so)", or the captured form of newer torch:
# "#3 relu_forward(at::Tensor) from relu_binding.cpp:12"
_CPP_FRAME_RE = re.compile(
    r"^frame #(?P<n>\d+): (?P<symbol>.*?)(?: \+ 0x[0-9a-f]+)?(?: \((?:0x[0-9a-f]+ )?in (?P<lib>[^)]*)\))?$"
)
_CAPTURED_FRAME_RE = re.compile(r"^#(?P<n>\d+) (?P<symbol>.*) from (?P<lib>\S+)$")
_CAPTURED_HEADER = "C++ CapturedTraceback:"
# torch's advice after a CUDA error, which the agent cannot follow (it sets no environment and no build flag)
_TORCH_BOILERPLATE = (
    "CUDA kernel errors might be asynchronously reported",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions",
    "Device-side assertion tracking was not enabled by user",
    "Device-side assertions were explicitly omitted for this error check",
)
_SEARCH_FOR_CODE_RE = re.compile(r"^Search for `(?P<code>cuda\w+)'")
MAX_CPP_FRAMES = 3


def is_own_cpp_frame(symbol: str, where: str) -> bool:
    """Whether a C++ frame lies in the agent's code: its extension (``cuda_extension``, or a ``load_inline`` module,
    built into the cache's ``builds`` folder or, by torch itself, under ``torch_extensions``) or a file of its
    workspace (``kernels/...``, ``binding.cpp``)."""
    if symbol.startswith("<unknown function>"):
        return False
    return (
        "cuda_extension" in where
        or "torch_extensions" in where
        or "/builds/" in where
        or where.startswith(("kernels/", "binding.cpp"))
        or "/kernels/" in where
    )


def _short_cpp_frame(symbol: str, where: str) -> str:
    name = where.rsplit("/", 1)[-1] if where else ""
    return f"  {symbol[:200]}" + (f" in {name}" if name else "")


def _condense_cpp(lines: list[str]) -> list[str]:
    """torch's C++ error text: its advice the agent cannot follow left out, the "raised from" line kept only where
    it is in the agent's code, and of the C++ frames only a few of the agent's own (a count for the rest)."""
    out: list[str] = []
    frames_seen = 0
    frames_kept: list[str] = []

    def flush() -> None:
        nonlocal frames_seen
        if frames_seen:
            kept = frames_kept[:MAX_CPP_FRAMES]
            out.append(
                f"  [{frames_seen} C++ frames; "
                + (f"those in your code: {len(kept)}]" if kept else "none in your code]")
            )
            out.extend(kept)
        frames_seen = 0
        frames_kept.clear()

    for line in lines:
        stripped = line.strip()
        frame = _CPP_FRAME_RE.match(stripped) or _CAPTURED_FRAME_RE.match(stripped)
        if frame is not None:
            frames_seen += 1
            symbol, where = frame.group("symbol"), frame.group("lib") or ""
            if is_own_cpp_frame(symbol, where):
                frames_kept.append(_short_cpp_frame(symbol, where))
            continue
        if stripped == _CAPTURED_HEADER:
            continue
        flush()
        raised = _RAISED_FROM_RE.match(stripped)
        if raised is not None:
            if is_own_cpp_frame(raised.group("func"), raised.group("file")):
                out.append(f"raised from {raised.group('func')} at {raised.group('file')}:{raised.group('line')}")
            continue
        if any(b in stripped for b in _TORCH_BOILERPLATE):
            continue
        code = _SEARCH_FOR_CODE_RE.match(stripped)
        if code is not None:
            out.append(f"(CUDA's error code: {code.group('code')})")
            continue
        out.append(line)
    flush()
    return out


# -- repeats --------------------------------------------------------------------------------------------------------

# a device-side assert prints "<file>:<line>: <kernel>: block: [x,y,z], thread: [x,y,z] Assertion `...` failed."
# once per failing thread: the same line but for the coordinates
_COORDINATES_RE = re.compile(r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\]")
KEEP_OF_A_REPEAT = 2


def collapse_repeats(lines: Iterable[str]) -> list[str]:
    """Runs of the same line (a device-side assert's line counts as the same for every block and thread) kept
    ``KEEP_OF_A_REPEAT`` times, then one line with the count of the rest."""
    out: list[str] = []
    run_key: str | None = None
    run_length = 0

    def close_run() -> None:
        if run_length > KEEP_OF_A_REPEAT:
            more = run_length - KEEP_OF_A_REPEAT
            out.append(f"[... the line above {more} more time{'s' if more > 1 else ''}, for other threads or calls]")

    for line in lines:
        key = _COORDINATES_RE.sub("block: [], thread: []", line)
        if key == run_key and line.strip():
            run_length += 1
            if run_length <= KEEP_OF_A_REPEAT:
                out.append(line)
            continue
        close_run()
        run_key, run_length = key, 1
        out.append(line)
    close_run()
    return out


def _drop_blank_runs(lines: list[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if not line.strip() and (not out or not out[-1].strip()):
            continue
        out.append(line.rstrip())
    while out and not out[-1].strip():
        out.pop()
    return out


def condense(text: str, limit: int = 3000) -> str:
    """The candidate's output as the agent needs it (see the module docstring), at most ``limit`` characters (head
    and tail kept)."""
    lines = strip_harness_warnings(text.splitlines())
    lines = [line for line in lines if not _FAULTHANDLER_NOISE_RE.match(line.strip())]
    lines = _condense_cpp(lines)
    lines = _condense_frames(lines)
    lines = collapse_repeats(lines)
    return cut(hide_install_paths("\n".join(_drop_blank_runs(lines))), limit)


# -- CUDA faults ------------------------------------------------------------------------------------------------


_CUDA_ERROR_LINE_RE = re.compile(r"CUDA (?:driver )?error: (?P<error>[^\n]+)", re.IGNORECASE)
_CUDA_CODE_RE = re.compile(r"\b(cudaError[A-Z]\w+|CUDA_ERROR_[A-Z_]+)\b")
_DEVICE_ASSERT_RE = re.compile(r"Assertion `.*` failed|device-side assert", re.IGNORECASE)


def find_cuda_fault(text: str) -> CudaFault | None:
    """The CUDA fault ``text`` reports (a ``CUDA error: ...`` line naming a known fault, or a device-side assert),
    None when it reports none. Its ``kernels`` and ``sanitizer`` are left for the evaluator to fill in."""
    code_match = _CUDA_CODE_RE.search(text)
    code = code_match.group(1) if code_match else ""
    for match in _CUDA_ERROR_LINE_RE.finditer(text):
        error = match.group("error").strip().rstrip(".")
        kind = next((name for name in CUDA_ERROR_NAMES if name in error.lower()), "")
        if kind:
            return CudaFault(error=error, kind=kind, code=code)
    if _DEVICE_ASSERT_RE.search(text):
        return CudaFault(error="device-side assert triggered", kind="device-side assert", code=code)
    return None


def headline(message: str, limit: int = 300) -> str:
    """The first line of an error message that says something (torch's advice and C++ frames left out), cut to
    ``limit`` characters: what a result's one-line ``message`` carries."""
    for line in _condense_cpp(message.splitlines()):
        if line.strip() and not line.lstrip().startswith("["):
            text = line.strip()
            return text if len(text) <= limit else text[: limit - 3] + "..."
    return ""
