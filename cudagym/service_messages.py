"""The evaluation service's messages: what a client session and ``cudagym serve`` / ``cudagym pool`` say to each other.

A session is one connection: ``Open`` (the task, backend and configuration), then any number of ``Evaluate`` (one
stage on the client's workspace) and ``Retarget`` (another task), then ``Close``. ``Hello`` may come at any time and
needs no session. Every request gets exactly one reply: its own type's (``Opened``, ``Evaluated``, ``Acknowledged``,
``ServerInfo``) or ``Refused`` with the reason. Each message travels as one JSON object tagged with its type's name
(:func:`cudagym.harness.protocol.encode_tagged`) and is read back field by field against its type hints, so a
message out of protocol is refused by name on either side instead of failing somewhere later.

Tasks, configurations, workspace limits and results travel in :mod:`cudagym.codec`'s dict form inside the
messages; the codec rebuilds them as their frozen dataclasses.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any, ClassVar

from cudagym.harness.protocol import ProtocolError, decode_tagged, encode_tagged

PROTOCOL = 2
"""The service protocol's version; ``Open`` carries the client's and the server refuses another."""

STAGES = ("compile", "verify", "profile", "submit")
"""The stages a session may ask the server to run."""


@dataclasses.dataclass(frozen=True)
class WorkspaceSpec:
    """Where the client's workspace is (the server's machine sees the same path) and the original bytes of its fixed
    files (base64), which the server checks and restores as a local evaluator does."""

    path: str
    fixed: dict[str, str]
    limits: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, path: str, fixed: dict[str, bytes], limits: dict[str, Any]) -> WorkspaceSpec:
        return cls(path, {name: base64.b64encode(data).decode() for name, data in fixed.items()}, limits)

    def fixed_bytes(self) -> dict[str, bytes]:
        """The fixed files' original content; ``ProtocolError`` if one is not base64."""
        try:
            return {name: base64.b64decode(text, validate=True) for name, text in self.fixed.items()}
        except ValueError as exc:
            raise ProtocolError(f"WorkspaceSpec.fixed: {exc}") from exc


# -- requests --------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Hello:
    """Is the server there, and what is it? (Needs no session.)"""

    needs_session: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True)
class Open:
    """Starts (or restarts) the connection's session: ``task`` and ``config`` in codec form, on ``backend``."""

    protocol: int
    task: dict[str, Any]
    backend: str
    config: dict[str, Any]
    needs_session: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True)
class Retarget:
    """The session's environment moved to another task (codec form)."""

    task: dict[str, Any]
    needs_session: ClassVar[bool] = True


@dataclasses.dataclass(frozen=True)
class Evaluate:
    """Runs ``stage`` (one of :data:`STAGES`) on the workspace; ``ncu`` asks a profile for Nsight Compute's counters."""

    stage: str
    workspace: WorkspaceSpec
    ncu: bool = False
    needs_session: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ProtocolError(f"Evaluate.stage: {self.stage!r} is not one of {list(STAGES)}")
        if self.ncu and self.stage != "profile":
            raise ProtocolError(f"Evaluate.ncu: only a profile takes Nsight Compute, not a {self.stage}")


@dataclasses.dataclass(frozen=True)
class Close:
    """Ends the session; the server stops its processes (the connection may stay open)."""

    needs_session: ClassVar[bool] = False


REQUESTS: tuple[type, ...] = (Hello, Open, Retarget, Evaluate, Close)

# -- replies ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Acknowledged:
    """The request was carried out (``Open``, ``Retarget``, ``Close``)."""


@dataclasses.dataclass(frozen=True)
class Evaluated:
    """A stage's result: the name of its result class and its codec form."""

    result_type: str
    result: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """What a server says of itself: its process, backend and device, sessions now and connections so far; the
    machine pool's server adds its pool's counters (``pool``)."""

    pid: int
    backend: str
    device: str
    sessions: int
    connections_served: int
    uptime_s: float
    pool: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Refused:
    """The request was not carried out, and why (out of protocol, before ``Open``, or the machinery failed)."""

    error: str


REPLY_FOR: dict[type, type] = {
    Hello: ServerInfo,
    Open: Acknowledged,
    Retarget: Acknowledged,
    Evaluate: Evaluated,
    Close: Acknowledged,
}
"""The reply each request is answered with when it is carried out (else ``Refused``)."""


def encode(message: Any) -> dict[str, Any]:
    """A request or reply as the JSON object that travels."""
    return encode_tagged(message)


def decode_request(raw: object) -> Any:
    """A request from its JSON object; ``ProtocolError`` for anything that is not one of :data:`REQUESTS`, or whose
    fields do not fit."""
    return decode_tagged(raw, REQUESTS)


def decode_reply(request: Any, raw: object) -> Any:
    """The reply to ``request`` from its JSON object: of the request's reply type or ``Refused``; ``ProtocolError``
    for any other."""
    return decode_tagged(raw, (REPLY_FOR[type(request)], Refused))
