"""A loopback OpenAI-compatible chat endpoint that replays scripted replies (for the llm agent's tests)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKENS_PER_REPLY = 100


def tool_call_reply(*calls: tuple[str, str, dict[str, Any]], content: str | None = None) -> dict[str, Any]:
    """An assistant message with native tool calls, each given as (id, name, arguments)."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            for call_id, name, arguments in calls
        ],
    }


def text_reply(content: str) -> dict[str, Any]:
    """An assistant message with text content only."""
    return {"role": "assistant", "content": content}


class ChatStub:
    """``POST /v1/chat/completions`` on 127.0.0.1 (a free port), answering with ``replies`` in order.

    A request with ``"stream": true`` gets its reply as server-sent chunks (one delta, the finish, the usage).

    A reply is an assistant message (a dict) or an HTTP status (an int) to fail with. Past the last reply
    it answers 400. Every request's JSON body is kept in ``requests``. It shuts itself down after
    ``lifetime`` seconds even if a test forgets to stop it.
    """

    def __init__(self, replies: Sequence[dict[str, Any] | int], *, lifetime: float = 120.0) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with stub._lock:
                    stub.requests.append(body)
                    reply = stub.replies.pop(0) if stub.replies else 400
                if not self.path.endswith("/chat/completions"):
                    reply = 404
                if isinstance(reply, int):
                    payload = {"error": {"message": f"scripted failure {reply}", "type": "stub", "code": reply}}
                    self._send(reply, payload)
                    return
                finish = "tool_calls" if reply.get("tool_calls") else "stop"
                if body.get("stream"):
                    self._send_stream(body.get("model", "stub"), reply, finish)
                    return
                payload = {
                    "id": f"chatcmpl-{len(stub.requests)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "stub"),
                    "choices": [{"index": 0, "message": reply, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": TOKENS_PER_REPLY},
                }
                self._send(200, payload)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _send_stream(self, model: str, reply: dict[str, Any], finish: str) -> None:
                """The reply as server-sent events: one delta with the whole message, the finish, the usage."""
                delta: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
                if reply.get("tool_calls"):
                    delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(reply["tool_calls"])]
                head = {"id": f"chatcmpl-{len(stub.requests)}", "object": "chat.completion.chunk", "created": 0}
                head["model"] = model
                usage = {"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": TOKENS_PER_REPLY}
                events = [
                    {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                    {**head, "choices": [], "usage": usage},
                ]
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._timer = threading.Timer(lifetime, self.server.shutdown)
        self._timer.daemon = True

    def __enter__(self) -> ChatStub:
        self._thread.start()
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._timer.cancel()
        if self._thread.is_alive():
            self.server.shutdown()
            self._thread.join(timeout=5)
        self.server.server_close()
