"""The trusted reference process as seen from the environment: typed requests over its stdin and typed replies on
the private channel (``cudagym/harness/protocol.py``; :mod:`cudagym.harness.reference` is the side that runs the
task's reference)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import TYPE_CHECKING

from cudagym.backends import Backend
from cudagym.harness.protocol import (
    Failed,
    Preload,
    ProtocolError,
    ReplyT,
    Request,
    Shutdown,
    decode_reply,
    encode_request,
)
from cudagym.sandbox import Child, signal_name

if TYPE_CHECKING:
    from cudagym.eval_config import EvalConfig

logger = logging.getLogger(__name__)


class ReferenceProcess:
    """The trusted reference child: request/response over stdin and the private channel. Several threads may
    call it (a stage and the baselines timed ahead); each call is one request and its reply, taken in turn.

    ``preload_compiler``: the process begins importing torch.compile's modules as soon as it starts, beside the
    task's loading (``ReferenceServer.preload``); torch itself is always imported from the start. ``env``: additions
    to its scrubbed environment (the bytecode cache it writes, ``cudagym/bytecode.py``)."""

    def __init__(
        self,
        backend: Backend,
        config: EvalConfig,
        *,
        preload_compiler: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        limits = dataclasses.replace(config.limits, cpu_seconds=None)
        self.child = Child("reference", limits=limits, threads=backend.threads, env=env)
        self.timeout = config.reference_timeout
        self._lock = threading.Lock()  # one request in flight: replies carry no request id
        hello = self.child.receive(time.monotonic() + 120)
        if not hello or not hello.get("ready"):
            output = self.child.output.text()
            self.child.kill()
            raise RuntimeError(f"the reference process did not start: {output[-2000:]}")
        self.call(Preload(compiler=preload_compiler, device=backend.device))

    def call(self, request: Request[ReplyT], timeout: float | None = None) -> ReplyT:
        """Sends ``request`` and returns its reply; raises RuntimeError where the process failed, refused or
        answered out of protocol (``timeout``: seconds, else ``EvalConfig.reference_timeout``)."""
        with self._lock:
            return self._exchange(request, timeout)

    def poll(self, request: Request[ReplyT], timeout: float | None = None) -> ReplyT | None:
        """``call``, but None at once where another call is in flight (a look that must not wait for a stage)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._exchange(request, timeout)
        finally:
            self._lock.release()

    def _exchange(self, request: Request[ReplyT], timeout: float | None) -> ReplyT:
        """One request and its reply (the caller holds the lock)."""
        command = request.command
        self.child.send(encode_request(request))
        raw = self.child.receive(time.monotonic() + (timeout or self.timeout))
        if raw is None:
            # a channel that closed as the process died can be seen before the process is reaped: a moment's wait
            ended = self.child.wait(0.5)
            detail = "no reply in time" if ended is None else self._ending(ended)
            self.child.kill()
            raise RuntimeError(f"reference process failed during {command}: {detail}")
        try:
            reply = decode_reply(request, raw)
        except ProtocolError as exc:
            raise RuntimeError(f"reference {command}: a reply out of protocol: {exc}") from exc
        if isinstance(reply, Failed):
            logger.debug("reference %s failed:\n%s", command, reply.error.traceback)
            message = reply.error.message.strip().splitlines()
            raise RuntimeError(f"reference {command} failed: {reply.error.type}: {message[0][:500] if message else ''}")
        return reply

    def _ending(self, code: int) -> str:
        """How the process ended (its exit status ``code``), with the end of what it wrote (a process killed from
        outside, by the kernel's out-of-memory killer say, often wrote nothing)."""
        sig = signal_name(code)
        how = f"it was killed by {sig}" if sig else f"it exited with code {code}"
        output = self.child.output.text(wait=0.1)[-3000:].strip()
        return f"{how}: {output}" if output else f"{how} and wrote nothing"

    @property
    def alive(self) -> bool:
        return self.child.alive

    def close(self) -> None:
        """Asks the process to end (when no call is in flight) and kills it; a call in flight then fails."""
        if self.child.alive and self._lock.acquire(timeout=0.5):
            try:
                self.child.send(encode_request(Shutdown()))
                self.child.receive(time.monotonic() + 2)
            finally:
                self._lock.release()
        self.child.kill()
