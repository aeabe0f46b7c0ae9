"""The evaluation service's typed messages: each survives the wire, and one out of protocol is refused by name."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from cudagym import service_messages as messages
from cudagym.harness.protocol import ProtocolError

SPEC = messages.WorkspaceSpec.of("/tmp/ws", {"model.py": b"class Model: ...\n", "empty": b""}, {"max_files": 64})
REQUESTS: list[Any] = [
    messages.Hello(),
    messages.Open(protocol=messages.PROTOCOL, task={"id": "builtin/relu"}, backend="cpu", config={"checks": 2}),
    messages.Retarget(task={"id": "builtin/gelu"}),
    messages.Evaluate("compile", SPEC),
    messages.Evaluate("profile", SPEC, ncu=True),
    messages.Close(),
]
REPLIES: list[tuple[Any, Any]] = [
    (messages.Hello(), messages.ServerInfo(1, "cpu", "AMD EPYC", 2, 5, 3.5, pool={"done": 3})),
    (messages.Open(1, {}, "cpu", {}), messages.Acknowledged()),
    (messages.Evaluate("verify", SPEC), messages.Evaluated("VerifyResult", {"status": "ok"})),
    (messages.Close(), messages.Refused("before Open")),
]


def wire(message: Any) -> object:
    return json.loads(json.dumps(messages.encode(message)))


def test_every_request_and_reply_survives_the_wire() -> None:
    assert set(messages.REQUESTS) == set(messages.REPLY_FOR)
    assert {type(r) for r in REQUESTS} == set(messages.REQUESTS)
    for request in REQUESTS:
        assert messages.decode_request(wire(request)) == request
    for request, reply in REPLIES:
        assert messages.decode_reply(request, wire(reply)) == reply
    assert messages.decode_request(wire(REQUESTS[3])).workspace.fixed_bytes() == {
        "model.py": b"class Model: ...\n",
        "empty": b"",
    }


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"op": "open"}, "expected one of"),  # the old untyped envelope
        ({"message": "Shutdown"}, "expected one of"),
        ("Hello", "is an object"),
        ({"message": "Open", "protocol": 2, "task": {}, "backend": "cpu"}, "missing field 'config'"),
        ({"message": "Close", "now": True}, "unknown field(s) ['now']"),
        ({"message": "Open", "protocol": "2", "task": {}, "backend": "cpu", "config": {}}, "Open.protocol"),
        ({"message": "Evaluate", "stage": "rm -rf", "workspace": {"path": "/", "fixed": {}}}, "Evaluate.stage"),
        ({"message": "Evaluate", "stage": "verify", "workspace": {"path": "/", "fixed": {}}, "ncu": True}, "ncu"),
        ({"message": "Evaluate", "stage": "verify", "workspace": {"path": "/", "fixed": {"a": 3}}}, "fixed"),
        ({"message": "Evaluate", "stage": "verify", "workspace": {"fixed": {}}}, "missing field 'path'"),
    ],
)
def test_a_request_out_of_protocol_is_refused_by_name(raw: object, named: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        messages.decode_request(raw)
    assert named in str(caught.value)


def test_fixed_files_that_are_not_base64_are_refused() -> None:
    request = messages.decode_request(
        {"message": "Evaluate", "stage": "verify", "workspace": {"path": "/w", "fixed": {"model.py": "not*base64"}}}
    )
    with pytest.raises(ProtocolError, match=r"WorkspaceSpec\.fixed"):
        request.workspace.fixed_bytes()
    assert base64.b64decode(SPEC.fixed["model.py"]) == b"class Model: ...\n"


def test_a_reply_of_another_request_is_refused() -> None:
    evaluate = messages.Evaluate("verify", SPEC)
    with pytest.raises(ProtocolError, match="expected one of"):
        messages.decode_reply(evaluate, wire(messages.Acknowledged()))  # Close's answer, not a result
    with pytest.raises(ProtocolError, match="missing field 'result'"):
        messages.decode_reply(evaluate, {"message": "Evaluated", "result_type": "VerifyResult"})
    assert messages.decode_reply(evaluate, wire(messages.Refused("busy"))) == messages.Refused("busy")
