"""Candidate processes forked from a warm server instead of started from scratch.

A candidate process used to spend seconds before it could take a job, 3.5 s of them in ``import torch`` on the H200
machine. The fork server (``harness/forkserver.py``) imports torch once per evaluator; each candidate is then a
``fork`` of it (milliseconds) that initialises its own CUDA context, enters its sandbox and runs one stage, exactly as
a freshly started child would. Candidates stay single-use: a fork shares nothing writable with the server or with
other candidates.

:class:`ForkServer` is the evaluator's handle on the server; :meth:`ForkServer.spawn` returns a
:class:`ForkedProcess`, which offers the part of ``subprocess.Popen`` that ``cudagym.sandbox.Child``
uses (``pid``, ``stdin``, ``stdout``, ``poll``, ``wait``, ``returncode``). The server is the parent of
every forked candidate, so it reaps them and reports each exit status over the socket.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO

from cudagym import bytecode
from cudagym.errors import HarnessError
from cudagym.harness.forkserver import PREIMPORT_ENV  # passed on to the server (what it imports before forking)
from cudagym.harness.protocol import Exited, ForkReady, Spawn, Spawned, decode_tagged, encode_tagged
from cudagym.sandbox import HARNESS_DIR, OutputCapture, harness_module

logger = logging.getLogger(__name__)

ENABLE_ENV = "CUDAGYM_FORK_SERVER"  # "0"/"off": candidates start as new interpreters whatever EvalConfig says
READY_TIMEOUT_S = 180.0  # importing torch on a loaded machine
SPAWN_TIMEOUT_S = 30.0


def fork_server_allowed() -> bool:
    """False when ``$CUDAGYM_FORK_SERVER`` turns the fork server off for this process."""
    return os.environ.get(ENABLE_ENV, "1").strip().lower() not in ("0", "off", "false", "no")


class ForkServerError(HarnessError):
    """The fork server is not available (it failed to start, died, or did not answer)."""


def returncode(status: int) -> int:
    """A wait status as ``Popen.returncode`` reads: the exit code, or minus the signal that killed it."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


class ForkedProcess:
    """A candidate process forked by the server: the ``Popen`` subset ``Child`` uses."""

    def __init__(self, server: ForkServer, pid: int, stdin: IO[bytes], stdout: IO[bytes], channel: int) -> None:
        self.server = server
        self.pid = pid
        self.args = ["<forked>", str(pid)]
        self.stdin = stdin
        self.stdout = stdout
        self.channel = channel  # the parent's (read) end of the private channel
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            status = self.server.exit_status(self.pid)
            if status is not None:
                self.returncode = returncode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            if self.server.wait_exit(self.pid, timeout) is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.poll()
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """One fork server process and the evaluator's end of its socket (thread-safe).

    Started at construction; it is ready (torch imported) seconds later, and :meth:`spawn` waits for
    that. ``env`` is the environment the server imports torch in: a candidate's scrubbed environment,
    since thread counts and library settings read at import time then hold for every fork. ``on_ready``
    is called with the server (in a thread of its own) once it is ready.
    """

    def __init__(self, env: dict[str, str], on_ready: Callable[[ForkServer], None] | None = None) -> None:
        self.on_ready = on_ready
        if PREIMPORT_ENV in os.environ:
            env = {PREIMPORT_ENV: os.environ[PREIMPORT_ENV], **env}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # trusted until it forks: it writes the bytecode cache it is given (cudagym/bytecode.py), its forks never do
        flags, env = bytecode.launch(env, writer=True)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, *flags, *harness_module("forkserver"), str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                env=env,
                cwd=str(HARNESS_DIR),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.output = OutputCapture(self.proc.stdout)
        self._lock = threading.Lock()  # one request on the socket at a time
        self._changed = threading.Condition()
        self._ready: bool | None = None
        self.preimported = False  # whether the server also imported the profiler's modules (PREIMPORT_ENV)
        self._error = ""
        self._replies: dict[int, Spawned] = {}
        self._exits: dict[int, int] = {}
        self._ids = itertools.count(1)
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="cudagym-forkserver", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            self._read_messages()
        except Exception as exc:  # a reader that died unseen would leave every waiter to its timeout
            logger.warning("reading the fork server's messages failed: %r", exc)
            with self._changed:
                self._error = self._error or f"reading its messages failed: {exc!r}"
                self._ready = False
                self._changed.notify_all()

    def _read_messages(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    if self._ready is None or self._ready:
                        self._error = self._error or "the fork server exited"
                    self._ready = False
                    self._changed.notify_all()
                    return
                message = decode_tagged(json.loads(data), (ForkReady, Spawned, Exited))
                if isinstance(message, ForkReady):
                    self._ready = message.ready
                    self.preimported = message.preimported
                    self._error = message.error
                    if self._ready:
                        logger.debug("fork server %d ready (profiler preimported: %s)", self.proc.pid, self.preimported)
                    else:
                        logger.warning("the fork server could not get ready: %s", self._error)
                    if self._ready and self.on_ready is not None:
                        threading.Thread(target=self.on_ready, args=(self,), name="cudagym-fill", daemon=True).start()
                elif isinstance(message, Exited):
                    self._exits[message.exit] = message.status
                else:
                    self._replies[message.id] = message
                self._changed.notify_all()

    @property
    def alive(self) -> bool:
        """Not known to have failed (it may still be importing torch)."""
        return self._ready is not False and not self._closed

    @property
    def ready(self) -> bool:
        """Ready to fork now (``spawn`` will not wait)."""
        return bool(self._ready) and not self._closed

    def wait_ready(self, timeout: float | None = None) -> None:
        """Blocks until the server has imported torch; raises ForkServerError when it cannot serve."""
        timeout = READY_TIMEOUT_S if timeout is None else timeout
        with self._changed:
            self._changed.wait_for(lambda: self._ready is not None, timeout)
            if self._ready is None:
                raise ForkServerError(f"the fork server was not ready within {timeout:.0f} s")
            if not self._ready:
                raise ForkServerError(f"{self._error}: {self.output.text(wait=1.0)[-2000:]}".strip())

    def spawn(self, role: str, spec: str, env: dict[str, str], cwd: str | None = None) -> ForkedProcess:
        """Forks a child that runs ``role`` with ``spec`` (see ``harness/child.py``) in environment ``env``."""
        self.wait_ready()
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        channel_r, channel_w = os.pipe()
        ours, theirs = (stdin_w, stdout_r, channel_r), (stdin_r, stdout_w, channel_w)
        try:
            with self._lock:
                request = Spawn(next(self._ids), role, spec, env, cwd)
                ident = request.id
                socket.send_fds(self.sock, [json.dumps(encode_tagged(request)).encode()], list(theirs))
        except OSError as exc:
            for fd in ours:
                os.close(fd)
            raise ForkServerError(f"the fork server did not take the request: {exc}") from exc
        finally:
            for fd in theirs:
                os.close(fd)
        with self._changed:
            self._changed.wait_for(lambda: ident in self._replies or self._ready is False, SPAWN_TIMEOUT_S)
            reply = self._replies.pop(ident, None)
        if reply is None or reply.error or not reply.pid:
            for fd in ours:
                os.close(fd)
            why = reply.error if reply else (self._error or "no answer")
            raise ForkServerError(f"the fork server could not start a {role}: {why}")
        pid = reply.pid
        logger.debug("forked a %s (pid %d)", role, pid)
        return ForkedProcess(self, pid, os.fdopen(stdin_w, "wb"), os.fdopen(stdout_r, "rb"), channel_r)

    def exit_status(self, pid: int) -> int | None:
        """The wait status of a forked process that ended, else None (also None while it runs).

        If the server died, its children were killed with it (or orphaned to init): they count as
        killed."""
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
            if self._ready is False:
                return int(signal.SIGKILL)  # the wait status of a process killed by SIGKILL
        return None

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._ready is False, timeout)
        return self.exit_status(pid)

    def close(self) -> None:
        """Ends the server (it kills the processes it forked) and waits for it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait(timeout=5)
        self._reader.join(timeout=5)
        self.sock.close()

    def __del__(self) -> None:
        try:
            if not self._closed and self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        except Exception:
            pass
