"""compute-sanitizer after a CUDA fault: which kernel faulted, in which thread and block, at which address.

CUDA reports a kernel's fault at the next call that waits for the device, so the candidate's own error says where the
fault *surfaced*, not which kernel caused it. When ``EvalConfig.fault_sanitizer`` allows it and NVIDIA's
``compute-sanitizer`` is installed, the evaluator runs the candidate once more, on one input set, under its memcheck
tool (a run of its own, untimed, like Nsight Compute's) and shows the first error of its report: the kind of access,
the kernel with its source line (the build has line information), the thread and block, and how far the address lies
from the nearest allocation. Without the tool this is simply not done.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from cudagym.text import cut

TOOL = "compute-sanitizer"
# an error's lines in the report start with this; a line of it alone separates the errors
_PREFIX_RE = re.compile(r"^=+ ?")
# where an error's host backtrace begins, which says nothing the agent can use (it runs to the error's end)
_HOST_BACKTRACE_RE = re.compile(r"^(?:Saved host backtrace|Host Frame:)")
_SUMMARY_RE = re.compile(r"^ERROR SUMMARY: (?P<count>\d+) errors?")
MAX_ERROR_LINES = 6
TIMEOUT_S = 120.0  # for the run under the sanitizer: torch's start under memcheck is slow


def find_tool() -> str | None:
    """The path of compute-sanitizer: on ``PATH``, or in the CUDA installation (``$CUDA_HOME``, /usr/local/cuda)."""
    found = shutil.which(TOOL)
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        candidate = Path(root) / "bin" / TOOL
        if root and candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def command_prefix(tool: str, log_file: Path) -> tuple[str, ...]:
    """What the candidate's command runs under: memcheck, a few errors at most, its report in ``log_file`` (apart
    from the candidate's own output), the device's call stack but not the host's."""
    return (
        tool,
        "--tool",
        "memcheck",
        "--print-limit",
        "4",
        "--show-backtrace",
        "device",
        "--log-file",
        str(log_file),
    )


def summarize(report: str, limit: int = 1200) -> str:
    """The first error of a compute-sanitizer report, its host backtrace left out, and the number of errors it
    found; "" when it found none."""
    errors: list[list[str]] = []
    current: list[str] = []
    in_host_backtrace = False
    total = ""
    for raw in report.splitlines():
        if not _PREFIX_RE.match(raw):
            continue
        line = _PREFIX_RE.sub("", raw, count=1).strip()
        summary = _SUMMARY_RE.match(line)
        if summary is not None:
            total = summary.group("count")
            continue
        if not line or line == "COMPUTE-SANITIZER":  # the end of an error
            if current:
                errors.append(current)
            current, in_host_backtrace = [], False
            continue
        in_host_backtrace = in_host_backtrace or bool(_HOST_BACKTRACE_RE.match(line))
        if not in_host_backtrace:
            current.append(line)
    if current:
        errors.append(current)
    # "Program hit cudaErrorLaunchFailure ... on CUDA API call to ...": the error the candidate's text names already
    errors = [e for e in errors if not e[0].startswith("Program hit")] or errors
    if not errors:
        return ""
    lines = errors[0][:MAX_ERROR_LINES]
    if total and total != "1":
        lines.append(f"({total} errors in all; the first is shown)")
    return cut("\n".join(lines), limit)
