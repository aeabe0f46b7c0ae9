"""The reference process's typed protocol (cudagym/harness/protocol.py): every message survives the wire as it was
written, and a message that does not fit its type is refused by name instead of read as a default."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import pytest

from cudagym.harness import protocol
from cudagym.harness.protocol import (
    Check,
    Done,
    ErrorReport,
    Failed,
    Held,
    HeldSets,
    Memory,
    MemoryUse,
    ProtocolError,
    Reply,
    TimeCandidate,
    Timed,
    decode,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
)


def _sample(hint: Any) -> Any:
    """A value of type ``hint`` other than the field's default (so that a field dropped on the way shows)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {"any": [1, "two"]}
    if origin in (typing.Union, types.UnionType):
        return _sample(next(a for a in args if a is not type(None)))
    if dataclasses.is_dataclass(hint):
        return _instance(typing.cast(type, hint))
    if origin is list:
        return [_sample(args[0]), _sample(args[0])]
    if origin is tuple:
        return (_sample(args[0]), _sample(args[0])) if args[-1] is Ellipsis else tuple(_sample(a) for a in args)
    if origin is dict:
        return {"first": _sample(args[1])}
    return {int: 7, float: 2.5, str: "text", bool: True}[hint]


def _instance(cls: type) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _sample(hints[f.name]) for f in dataclasses.fields(cls)})


def _wire(message: dict[str, Any]) -> Any:
    """Through JSON as the channel and stdin carry it (tuples become lists, and back)."""
    return json.loads(json.dumps(message))


REPLIES = sorted({r.reply for r in protocol.REQUESTS.values()}, key=lambda cls: cls.__name__)


@pytest.mark.parametrize("command", sorted(protocol.REQUESTS))
def test_every_request_survives_the_wire(command: str) -> None:
    request = _instance(protocol.REQUESTS[command])
    assert decode_request(_wire(encode_request(request))) == request


@pytest.mark.parametrize("reply_type", REPLIES, ids=lambda cls: cls.__name__)
def test_every_reply_survives_the_wire(reply_type: type[Reply]) -> None:
    reply = _instance(reply_type)
    request = next(_instance(r) for r in protocol.REQUESTS.values() if r.reply is reply_type)
    assert decode_reply(request, _wire(encode_reply(reply))) == reply


def test_a_failure_reads_as_failed_whatever_was_asked() -> None:
    failed = Failed(ErrorReport("KeyError", "'ahead'", "Traceback ...", ""))
    assert decode_reply(Held(), _wire(encode_reply(failed))) == failed
    assert encode_reply(failed)["ok"] is False and encode_reply(Done())["ok"] is True


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"command": "format_disk"}, "unknown command"),
        ({"command": "drop"}, "missing field 'key'"),
        ({"command": "drop", "key": "a", "force": True}, "unknown field"),
        ({"command": "drop", "key": 3}, "Drop.key: expected str"),
        ({"command": "host_bandwidth", "nbytes": True}, "expected an integer"),  # a bool is no number here
        ({"command": "host_bandwidth", "nbytes": 1.5}, "expected an integer"),
        ({"command": "verify_candidate", "plan": [[1, "task", 2]]}, "expected 2 items"),  # a plan step is a pair
        (["drop", "a"], "an object with a command"),
    ],
)
def test_a_request_that_does_not_fit_is_refused_by_name(raw: Any, says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        decode_request(raw)


def test_a_reply_that_does_not_fit_is_refused_by_name() -> None:
    with pytest.raises(ProtocolError, match="memory answers with MemoryUse, got 'HeldSets'"):
        decode_reply(Memory(), encode_reply(HeldSets(keys=[])))
    with pytest.raises(ProtocolError, match=r"MemoryUse\.peak_reserved_bytes: expected an integer"):
        decode_reply(Memory(), {"ok": True, "reply": "MemoryUse", "reserved_bytes": 0, "peak_reserved_bytes": "0"})
    with pytest.raises(ProtocolError, match="missing field 'reserved_bytes'"):
        decode_reply(Memory(), {"ok": True, "reply": "MemoryUse", "peak_reserved_bytes": 0})
    nested = {**encode_reply(Timed(failure=Check(3, False))), "failure": {"index": 3, "passed": "no"}}
    with pytest.raises(ProtocolError, match=r"Timed.failure.passed: expected bool"):
        decode_reply(TimeCandidate(timing={}, atol=0.0, rtol=0.0, seconds=1.0), nested)


def test_optional_values_and_defaults_read_as_written() -> None:
    assert decode(MemoryUse, {"reserved_bytes": 1, "peak_reserved_bytes": 2}) == MemoryUse(1, 2)
    timed = decode(Timed, {"median_ms": None, "failure": {"index": 0, "passed": False, "worst_index": [1, 2]}})
    assert timed.median_ms is None and timed.failure == Check(0, False, worst_index=(1, 2)) and timed.reps == 0


def test_what_a_candidate_wrote_of_its_failure_is_read_as_bounded_text() -> None:
    # the candidate's description of a failed call is its word, of any shape: text of bounded length, never a crash
    assert ErrorReport.from_candidate({"type": "RuntimeError", "message": "boom"}) == ErrorReport(
        "RuntimeError", "boom"
    )
    assert ErrorReport.from_candidate("just text").message == "just text"
    odd = ErrorReport.from_candidate({"type": ["not", "text"], "message": "x" * 10**6, "extra": 1})
    assert odd.type == "['not', 'text']" and len(odd.message) == protocol.MAX_TEXT


def test_a_candidates_job_is_read_against_its_type() -> None:
    job = protocol.CandidateJob(mode="serve", workspace="/w", link={"control": "/x"}, threads=2)
    assert decode(protocol.CandidateJob, _wire(dataclasses.asdict(job))) == job
    assert decode(protocol.CandidateJob, {"mode": "import", "workspace": "/w"}).link is None
    with pytest.raises(ProtocolError, match="one of"):
        decode(protocol.CandidateJob, {"mode": "run_anything", "workspace": "/w"})
    with pytest.raises(ProtocolError, match=r"CandidateJob\.threads: expected an integer"):
        decode(protocol.CandidateJob, {"mode": "serve", "workspace": "/w", "threads": "2"})


@pytest.mark.parametrize("kind", [protocol.ForkReady, protocol.Spawn, protocol.Spawned, protocol.Exited])
def test_the_fork_servers_messages_survive_the_wire_and_name_their_type(kind: type) -> None:
    message = _instance(kind)
    kinds = (protocol.ForkReady, protocol.Spawn, protocol.Spawned, protocol.Exited)
    assert protocol.decode_tagged(_wire(protocol.encode_tagged(message)), kinds) == message
    with pytest.raises(ProtocolError, match="expected one of"):
        protocol.decode_tagged(_wire(protocol.encode_tagged(message)), tuple(k for k in kinds if k is not kind))
