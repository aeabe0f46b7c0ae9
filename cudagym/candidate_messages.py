"""What a candidate process says on its channel, read into typed messages.

The channel is the candidate's word: the agent's code runs in that process and can write anything onto it (through
the harness's ``Channel`` object, found with ``gc``, or straight onto its file descriptor). So every line the
evaluator reads from a candidate is read here, by :func:`parse`, which never raises: a line that is not a message of
the protocol (not an object, an unknown step, a field of the wrong type) becomes a :class:`CandidateMessage` of step
``Step.UNKNOWN`` that no wait accepts, a malformed error report still counts as a failure (with what could be read
of it), and a malformed kernel table counts as no table. Nothing a candidate sends decides a number (the trusted
clock does); its messages open the way to the next step, describe its failures, and add findings against it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable
from typing import Any

from cudagym.results import KernelTime

MAX_TEXT = 8000  # characters kept of any text field (the harness's own reports are shorter)
MAX_KERNELS = 64  # rows kept of a kernel table (the harness sends its top 20)


class Step(enum.Enum):
    """Where the candidate says it is (``harness/candidate.py``)."""

    WARM = "warm"  # started: torch imported, CUDA and its tracing initialised
    LOAD = "load"  # loading model_new.py and the extension (or failed to)
    CALIBRATING = "calibrating"  # linked to the trusted clock, answering empty handshakes
    ATTACH = "attach"  # failed to link to the trusted clock
    READY = "ready"  # ModelNew built: serving the clock's calls
    RUN = "run"  # running ModelNew (a wrapped run), or failed while serving
    KERNELS = "kernels"  # its per-kernel device time over the stage
    BUILD = "build"  # a single-file import asks the trusted builder for a load_inline build
    DONE = "done"  # finished its work
    UNKNOWN = "unknown"  # not a message of the protocol


@dataclasses.dataclass(frozen=True)
class CandidateError:
    """A failure the candidate reports (``harness/common.describe_exception``): all of it text for the agent."""

    type: str = ""
    message: str = ""
    traceback: str = ""
    cuda: str = ""  # the CUDA error name the message shows, when it shows one


@dataclasses.dataclass(frozen=True)
class CandidateMessage:
    """One line of the channel.

    Attributes:
        step: where the candidate says it is.
        failed: it reports a failure (``ok: false``) at that step.
        error: what it says of the failure (None when it said nothing readable).
        kernels: its kernel table (``Step.KERNELS``); empty when it sent none or a malformed one.
        request: a single-file import's build request (``Step.BUILD``), checked by ``cudagym.inline_build``.
        key: which request a reply belongs to, where the step has one.
        text: a line that is not a message of the protocol (cut), for the logs.
    """

    step: Step
    failed: bool = False
    error: CandidateError | None = None
    kernels: tuple[KernelTime, ...] = ()
    request: Any = None
    key: str = ""
    text: str = ""


def _text(value: Any) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _error(value: Any) -> CandidateError | None:
    if isinstance(value, str):
        return CandidateError(message=_text(value))
    if not isinstance(value, dict):
        return None
    return CandidateError(*(_text(value.get(name)) for name in ("type", "message", "traceback", "cuda")))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _kernels(value: Any) -> tuple[KernelTime, ...]:
    """The table, or () when any row is malformed (a partial table could drop the rows that count against it)."""
    if not isinstance(value, list) or len(value) > MAX_KERNELS:
        return ()
    rows = []
    for row in value:
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            return ()
        calls, total, share = (_number(row.get(k)) for k in ("calls", "total_ms", "share"))
        if calls is None or total is None or share is None or min(calls, total, share) < 0 or share > 1:
            return ()
        rows.append(KernelTime(row["name"][:200], int(calls), total, share))
    return tuple(rows)


def parse(raw: object) -> CandidateMessage:
    """One channel line as decoded JSON (or a reader's ``{"garbled": text}``), as a typed message; never raises."""
    if not isinstance(raw, dict):
        return CandidateMessage(Step.UNKNOWN, text=repr(raw)[:200])
    try:
        step = Step(raw.get("stage"))
    except ValueError:
        step = Step.UNKNOWN
    if step is Step.UNKNOWN:
        return CandidateMessage(Step.UNKNOWN, text=_text(raw.get("garbled")) or repr(raw)[:200])
    failed = raw.get("ok") is False
    return CandidateMessage(
        step,
        failed=failed,
        error=_error(raw.get("error")) if failed else None,
        kernels=_kernels(raw.get("kernels")) if step is Step.KERNELS else (),
        request=raw.get("request") if step is Step.BUILD else None,
        key=_text(raw.get("key")),
    )


def read(raw_messages: Iterable[object]) -> list[CandidateMessage]:
    """Every message a candidate sent so far (``Child.messages``), typed."""
    return [parse(raw) for raw in raw_messages]
