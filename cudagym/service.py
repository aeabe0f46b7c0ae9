"""A local evaluation service: one server per machine (or per GPU) shared by many environments.

The server (``cudagym serve --socket PATH``) owns one :class:`~cudagym.evaluator.LocalEvaluator` per
client session and serves each connection on a thread of its own, so compiles and correctness checks
of different environments proceed in parallel while timed runs take turns on the device's timing slot
(:mod:`cudagym.gpu_lock`). The client, :class:`ServiceEvaluator`, implements the same ``Evaluator``
protocol as ``LocalEvaluator``; an environment uses it through its evaluator factory::

    env = gym.make("CudaKernel-v0", evaluator_factory=ServiceEvaluatorFactory("/tmp/cudagym.sock"))

Workspaces stay where the environment made them (same machine); requests carry the workspace's path and
the original content of its fixed files, so the server checks and restores them as a local evaluator
does. The messages are typed (:mod:`cudagym.service_messages`: one request, one reply of the request's own
type or ``Refused``); results travel in their dict form and come back as the same frozen dataclasses.
Whatever goes wrong between client and server (no server, server gone, no reply in time) comes back as
a ``Status.HARNESS_ERROR`` result, never as an exception at the agent.

The transport is a small seam (:class:`Transport`): here a Unix socket with a shared key (a 0600 file
next to the socket) authenticating both ends; a Ray actor handle can implement the same ``request``.
"""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener, answer_challenge, deliver_challenge
from pathlib import Path
from typing import Any, Protocol

from cudagym import results
from cudagym import service_messages as messages
from cudagym.backends import Backend, resolve_backend
from cudagym.build import default_cache_dir
from cudagym.codec import decode, encode
from cudagym.errors import HarnessError
from cudagym.evaluator import EvalConfig, Evaluator, LocalEvaluator
from cudagym.harness.protocol import ProtocolError
from cudagym.results import Stage, StageResult, Status
from cudagym.tasks.task import Task
from cudagym.text import clean
from cudagym.workspace import Workspace, WorkspaceLimits

logger = logging.getLogger(__name__)
_RESULT_TYPES = {
    cls.__name__: cls
    for cls in vars(results).values()
    if isinstance(cls, type) and issubclass(cls, StageResult) and dataclasses.is_dataclass(cls)
}
_STAGE_CLASS = {
    "compile": (results.CompileResult, Stage.COMPILE),
    "verify": (results.VerifyResult, Stage.VERIFY),
    "profile": (results.ProfileResult, Stage.PROFILE),
    "submit": (results.SubmitResult, Stage.SUBMIT),
}


# -- the wire format: :mod:`cudagym.codec` ---------------------------------------------------------


def decode_result(kind: str, data: dict[str, Any]) -> StageResult:
    """A result from its class name and dict form; ValueError for a class that is not a result."""
    if kind not in _RESULT_TYPES:
        raise ValueError(f"unknown result type {kind!r}")
    return decode(_RESULT_TYPES[kind], data)


def _workspace_spec(workspace: Workspace) -> messages.WorkspaceSpec:
    return messages.WorkspaceSpec.of(str(workspace.path), workspace._fixed_content, encode(workspace.limits))


class AttachedWorkspace(Workspace):
    """The server's view of a client's workspace directory: the same checks, no directory of its own.

    ``fixed`` is the original content of the fixed files as the client wrote them (not what is on disk
    now, which the agent may have changed). ``remove()`` does nothing: the client owns the directory.
    """

    def __init__(self, path: str | Path, fixed: dict[str, bytes], limits: WorkspaceLimits | None = None) -> None:
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise FileNotFoundError(f"workspace {self.path} does not exist on the server's machine")
        self.limits = limits or WorkspaceLimits()
        self._fixed_content = dict(fixed)
        self._fixed_hash = {name: hashlib.sha256(data).hexdigest() for name, data in fixed.items()}

    def remove(self) -> None:
        return None


# -- the transport seam ----------------------------------------------------------------------------


class TransportError(HarnessError):
    """The request did not reach the server or no reply came back (the session may be lost)."""


class Transport(Protocol):
    """Carries one request of :mod:`cudagym.service_messages` (as its JSON object) to the server of a session and
    returns the reply's JSON object.

    The first request of a session is ``Open``; a transport that loses its connection raises TransportError and
    starts a new session (the client then opens it again).
    """

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]: ...
    def close(self) -> None: ...


def key_path(socket_path: str | Path) -> Path:
    """Where the server keeps the key that clients authenticate with (mode 0600)."""
    return Path(f"{socket_path}.key")


def default_socket_path() -> Path:
    """``$CUDAGYM_SERVICE_SOCKET``, else ``$XDG_RUNTIME_DIR/cudagym/eval.sock``, else ``/tmp/cudagym-<uid>/...``."""
    if os.environ.get("CUDAGYM_SERVICE_SOCKET"):
        return Path(os.environ["CUDAGYM_SERVICE_SOCKET"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "cudagym" / "eval.sock"
    return Path(f"/tmp/cudagym-{os.getuid()}") / "eval.sock"


class UnixSocketTransport:
    """A session over a Unix socket (``multiprocessing.connection`` framing, JSON payloads, shared key)."""

    def __init__(self, socket_path: str | Path) -> None:
        self.socket_path = str(socket_path)
        self._conn: Connection | None = None

    def _connect(self) -> Connection:
        try:
            authkey = key_path(self.socket_path).read_bytes()
            return Client(self.socket_path, family="AF_UNIX", authkey=authkey)
        except (OSError, EOFError) as exc:
            raise TransportError(f"cannot reach the evaluation service at {self.socket_path}: {exc}") from exc
        except (AuthenticationError, ValueError) as exc:  # a wrong key, or not our protocol
            raise TransportError(f"the evaluation service at {self.socket_path} refused us: {exc}") from exc

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self._conn is None:
            self._conn = self._connect()
        try:
            self._conn.send_bytes(json.dumps(message).encode())
            if not self._conn.poll(timeout):
                raise TransportError(f"no reply from the evaluation service within {timeout:.0f} s")
            return json.loads(self._conn.recv_bytes())
        except TransportError:
            self.close()
            raise
        except (OSError, EOFError, ValueError) as exc:
            self.close()
            raise TransportError(f"the connection to the evaluation service broke: {exc!r}") from exc

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None


# -- the client ------------------------------------------------------------------------------------


class ServiceEvaluator:
    """An ``Evaluator`` whose work is done by the evaluation service (see the module docstring).

    Args:
        task, backend, config: as for ``LocalEvaluator``; the server must run the same backend.
        socket_path: the server's socket (default :func:`default_socket_path`); ignored with ``transport``.
        transport: how requests travel (default a :class:`UnixSocketTransport`).
        call_timeout: seconds to wait for one reply (default: the sum of the config's stage timeouts).
    """

    def __init__(
        self,
        task: Task,
        backend: Backend,
        config: EvalConfig | None = None,
        *,
        socket_path: str | Path | None = None,
        transport: Transport | None = None,
        call_timeout: float | None = None,
    ) -> None:
        self.task = task
        self.backend = backend
        self.config = config or EvalConfig()
        self.transport = transport or UnixSocketTransport(socket_path or default_socket_path())
        cfg = self.config
        stages = cfg.build.timeout_seconds + cfg.verify_timeout + cfg.profile_timeout + cfg.reference_timeout
        self.call_timeout = call_timeout or stages + 60.0
        self._open = False
        self._retarget = False

    def _request(self, request: Any) -> Any:
        """``request``'s reply, of the type that carries it out; RuntimeError with the server's reason for a
        ``Refused``, ``ProtocolError`` for a reply out of protocol, TransportError for a lost one."""
        reply = messages.decode_reply(request, self.transport.request(messages.encode(request), self.call_timeout))
        if isinstance(reply, messages.Refused):
            raise RuntimeError(reply.error or "the service gave no reason")
        return reply

    def _session(self) -> None:
        if not self._open:
            self._request(
                messages.Open(
                    protocol=messages.PROTOCOL,
                    task=encode(self.task),
                    backend=self.backend.name,
                    config=encode(self.config),
                )
            )
            self._open, self._retarget = True, False
        elif self._retarget:
            self._request(messages.Retarget(task=encode(self.task)))
            self._retarget = False

    def _call(self, stage_name: str, workspace: Workspace, *, ncu: bool = False) -> Any:
        cls, stage = _STAGE_CLASS[stage_name]
        start = time.monotonic()
        try:
            self._session()
            reply = self._request(messages.Evaluate(stage_name, _workspace_spec(workspace), ncu=ncu))
            result = decode_result(reply.result_type, reply.result)
            if not isinstance(result, cls):
                raise ValueError(f"the service answered {stage_name} with a {type(result).__name__}")
            return result
        except TransportError as exc:
            self._open = False  # the next call connects and opens a new session
            reason = str(exc)
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:  # ProtocolError is a ValueError
            reason = f"{type(exc).__name__}: {exc}"
        logger.warning("the evaluation service failed a %s of %s: %s", stage_name, self.task.id, reason)
        return cls(
            stage=stage,
            status=Status.HARNESS_ERROR,
            seconds=time.monotonic() - start,
            message=f"The evaluation service failed: {clean(reason, 1500)}",
        )

    def compile(self, workspace: Workspace) -> results.CompileResult:
        return self._call("compile", workspace)

    def verify(self, workspace: Workspace) -> results.VerifyResult:
        return self._call("verify", workspace)

    def profile(self, workspace: Workspace, *, ncu: bool = False) -> results.ProfileResult:
        return self._call("profile", workspace, ncu=ncu)

    def submit(self, workspace: Workspace) -> results.SubmitResult:
        return self._call("submit", workspace)

    def retarget(self, task: Task) -> None:
        """Switches task; the server hears of it with the next call."""
        if task.id != self.task.id:
            self.task = task
            self._retarget = self._open

    def close(self) -> None:
        """Ends the session (the server stops its processes); never raises."""
        if self._open:
            try:
                self.transport.request(messages.encode(messages.Close()), timeout=10.0)
            except TransportError:
                pass
        self._open = False
        self.transport.close()


@dataclasses.dataclass(frozen=True)
class ServiceEvaluatorFactory:
    """An ``evaluator_factory`` for ``CudaKernelEnv`` that evaluates through the service at ``socket_path``
    (picklable, so vector envs in spawned workers can use it)."""

    socket_path: str
    call_timeout: float | None = None

    def __call__(self, task: Task, backend: Backend, config: EvalConfig) -> ServiceEvaluator:
        return ServiceEvaluator(task, backend, config, socket_path=self.socket_path, call_timeout=self.call_timeout)


# -- the server ------------------------------------------------------------------------------------


class _Session:
    """One client's state on the server: its evaluator (made by ``Open``, through ``server.make_evaluator``)."""

    def __init__(self, server: EvaluationServer) -> None:
        self.server = server
        self.evaluator: Evaluator | None = None

    def handle(self, request: Any) -> Any:
        """The reply to one request (``messages.REPLY_FOR`` its type, or ``Refused``)."""
        if request.needs_session and self.evaluator is None:
            return messages.Refused(f"{type(request).__name__} before Open")
        if isinstance(request, messages.Hello):
            return self.server.info()
        if isinstance(request, messages.Open):
            if request.protocol != messages.PROTOCOL:
                return messages.Refused(f"protocol {request.protocol} != the server's {messages.PROTOCOL}")
            if request.backend != self.server.backend.name:
                return messages.Refused(
                    f"the server runs the {self.server.backend.name} backend, the client asked for {request.backend}"
                )
            self.close()
            task, config = decode(Task, request.task), decode(EvalConfig, request.config)
            self.evaluator = self.server.make_evaluator(task, config)
            logger.debug("session opened for %s", task.id)
            return messages.Acknowledged()
        if isinstance(request, messages.Close):
            self.close()
            return messages.Acknowledged()
        assert self.evaluator is not None
        if isinstance(request, messages.Retarget):
            self.evaluator.retarget(decode(Task, request.task))
            return messages.Acknowledged()
        assert isinstance(request, messages.Evaluate)
        spec = request.workspace
        workspace = AttachedWorkspace(spec.path, spec.fixed_bytes(), decode(WorkspaceLimits, spec.limits))
        options = {"ncu": request.ncu} if request.stage == "profile" else {}
        result = getattr(self.evaluator, request.stage)(workspace, **options)
        return messages.Evaluated(type(result).__name__, encode(result))

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None


class EvaluationServer:
    """Serves evaluation sessions on a Unix socket, one thread per connection (see the module docstring).

    Args:
        socket_path: where to listen; a stale socket file is replaced, a live server is an error.
        backend: the backend every session evaluates on.
        cache_dir: the build and baseline cache (default: the usual cache directory).
    """

    def __init__(self, socket_path: str | Path, backend: Backend, *, cache_dir: str | Path | None = None) -> None:
        self.socket_path = Path(socket_path)
        if len(str(self.socket_path).encode()) > 100:
            raise ValueError(f"socket path too long for AF_UNIX (at most 100 bytes): {self.socket_path}")
        self.backend = backend
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.started = time.time()
        self._sessions: set[_Session] = set()
        self._lock = threading.Lock()
        self._served = 0
        self._stopping = False
        self._listener: Listener | None = None

    def make_evaluator(self, task: Task, config: EvalConfig) -> Evaluator:
        """A session's evaluator: here a ``LocalEvaluator`` of its own (the machine pool's server lends shared
        ones instead, ``cudagym.pool.server``)."""
        return LocalEvaluator(task, self.backend, config, cache_dir=self.cache_dir)

    def info(self) -> messages.ServerInfo:
        """What ``Hello`` answers."""
        with self._lock:
            sessions, served = len(self._sessions), self._served
        return messages.ServerInfo(
            pid=os.getpid(),
            backend=self.backend.name,
            device=self.backend.device_name,
            sessions=sessions,
            connections_served=served,
            uptime_s=time.time() - self.started,
        )

    def _bind(self) -> Listener:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.socket_path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(self.socket_path))
                raise RuntimeError(f"an evaluation service is already listening on {self.socket_path}")
            except (ConnectionRefusedError, FileNotFoundError):
                self.socket_path.unlink(missing_ok=True)  # left by a server that died
            finally:
                probe.close()
        key = key_path(self.socket_path)
        key.unlink(missing_ok=True)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
        listener = Listener(str(self.socket_path), family="AF_UNIX")
        os.chmod(self.socket_path, 0o600)
        return listener

    def serve_forever(self) -> None:
        """Accepts connections until :meth:`shutdown` (or an exception in the calling thread)."""
        self._listener = self._bind()
        authkey = key_path(self.socket_path).read_bytes()
        logger.info("serving %s evaluations on %s", self.backend.name, self.socket_path)
        try:
            while not self._stopping:
                try:
                    conn = self._listener.accept()
                except OSError:
                    if self._stopping:
                        break
                    raise
                threading.Thread(target=self._serve, args=(conn, authkey), daemon=True).start()
        finally:
            self.shutdown()

    def _serve(self, conn: Connection, authkey: bytes) -> None:
        """One connection: the key handshake (here, not in accept, so a slow client stalls only itself),
        then one request and one reply at a time until the client leaves."""
        session = _Session(self)
        with self._lock:
            self._sessions.add(session)
            self._served += 1
        try:
            deliver_challenge(conn, authkey)
            answer_challenge(conn, authkey)
            while True:
                raw = json.loads(conn.recv_bytes())
                reply = self._answer(session, raw)
                conn.send_bytes(json.dumps(messages.encode(reply)).encode())
        except AuthenticationError:
            logger.warning("refused a connection to %s that did not hold the key", self.socket_path)
        except (EOFError, OSError, ValueError):
            pass  # the client left
        finally:
            session.close()
            conn.close()
            with self._lock:
                self._sessions.discard(session)

    @staticmethod
    def _answer(session: _Session, raw: object) -> Any:
        """The reply to one message off the wire: ``Refused`` for one out of protocol or one the machinery failed
        (the client reports a harness error), the session's answer otherwise."""
        try:
            request = messages.decode_request(raw)
        except ProtocolError as exc:
            logger.warning("refused a message out of protocol: %s", exc)
            return messages.Refused(f"out of protocol: {exc}")
        try:
            return session.handle(request)
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(exc)).strip()
            name = type(request).__name__
            logger.warning("a %s request failed in the server: %s", name, detail, exc_info=exc)
            return messages.Refused(f"{detail} (in {name})")

    def shutdown(self) -> None:
        """Stops accepting, ends every session (their processes stop) and removes the socket; idempotent."""
        if self._stopping and self._listener is None:
            return
        self._stopping = True
        listener, self._listener = self._listener, None
        if listener is not None:
            try:  # wake a blocked accept()
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                    wake.connect(str(self.socket_path))
            except OSError:
                pass
            listener.close()
        with self._lock:
            sessions = list(self._sessions)
        for session in sessions:
            session.close()
        key_path(self.socket_path).unlink(missing_ok=True)


def spawn_server(
    socket_path: str | Path,
    backend: str = "auto",
    *,
    cache_dir: str | Path | None = None,
    env: dict[str, str] | None = None,
    ready_timeout: float = 60.0,
    command_name: str = "serve",
    options: collections.abc.Sequence[str] = (),
) -> subprocess.Popen:
    """Starts ``cudagym serve`` (or ``command_name``: ``pool``, the machine pool, with its ``options``) in a new
    session and returns once it answers (RuntimeError if it does not)."""
    command = [sys.executable, "-m", "cudagym.cli", command_name, "--socket", str(socket_path), "--backend", backend]
    command += list(options)
    if cache_dir:
        command += ["--cache-dir", str(cache_dir)]
    proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, start_new_session=True)
    deadline = time.monotonic() + ready_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the evaluation service exited with status {proc.returncode} while starting")
        if key_path(socket_path).exists():
            transport = UnixSocketTransport(socket_path)
            try:
                hello = messages.Hello()
                reply = messages.decode_reply(hello, transport.request(messages.encode(hello), timeout=10))
                if isinstance(reply, messages.ServerInfo):
                    return proc
            except (TransportError, ProtocolError):
                pass
            finally:
                transport.close()
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"the evaluation service did not answer within {ready_timeout:.0f} s")


# -- the command -----------------------------------------------------------------------------------


def run_server(server: EvaluationServer, command: str) -> int:
    """Serves until SIGTERM or Ctrl-C (the body of ``cudagym serve`` and ``cudagym pool``)."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    backend = server.backend
    print(f"cudagym {command}: {backend.name} ({backend.device_name}) on {server.socket_path}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def _serve_command(args: argparse.Namespace) -> int:
    backend = resolve_backend(args.backend)
    server = EvaluationServer(args.socket or default_socket_path(), backend, cache_dir=args.cache_dir)
    return run_server(server, "serve")


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments ``cudagym serve`` and ``cudagym pool`` share: where to listen, the backend, the cache."""
    parser.add_argument("--socket", help=f"Unix socket path (default {default_socket_path()})")
    parser.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--cache-dir", help="build and baseline cache (default: the usual cache directory)")


def add_service_commands(sub: Any) -> None:
    """Adds ``cudagym serve`` (an evaluator per session) and ``cudagym pool`` (the machine's shared pool, same
    client) to the CLI's subcommands."""
    from cudagym.pool.server import add_pool_command

    serve = sub.add_parser("serve", help="run the local evaluation service shared by environments")
    add_server_arguments(serve)
    serve.set_defaults(func=_serve_command)
    add_pool_command(sub)
