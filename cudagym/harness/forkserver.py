"""The fork server: imports torch and the harness once, then forks a fresh candidate process per request.

Started by ``cudagym.forkserver.ForkServer`` as ``cudagym.harness.forkserver FD`` (FD: its end of a ``SOCK_SEQPACKET``
socket pair). Importing torch costs seconds per process; a fork costs milliseconds. CUDA is never touched here, so
every forked candidate initialises its own CUDA context after the fork (a CUDA context does not survive ``fork``), and
nothing one candidate does reaches the next: each is a new process, used once, then killed.

Protocol (the typed messages of ``protocol.py``, as JSON, one per packet):

* server -> client, once: ``ForkReady`` (ready, or not and why);
* client -> server: ``Spawn`` (an id, the role, its spec, environment and folder) with three file descriptors
  attached (the child's stdin, its stdout/stderr, its private channel);
* server -> client: ``Spawned`` (the id and the child's pid, or an error), and when that process ends ``Exited``.

The child becomes what ``cudagym.harness.child ROLE FD SPEC`` would be: a new session, its own environment,
the sandbox and rlimits of SPEC (``child.prepare``: a PID namespace, or else a guard that adopts and kills what
the candidate orphans), then its role. The server is the child subreaper of everything below it, the second line
behind those: a process re-parented here (its guard was killed) is killed within ORPHAN_SCAN_S.
When the client's end of the socket closes, the server kills its children and exits.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import traceback
import warnings
from typing import NoReturn

from .common import launch_arguments
from .protocol import Exited, ForkReady, ProtocolError, Spawn, Spawned, decode_tagged, encode_tagged

PR_SET_CHILD_SUBREAPER = 36
MAX_PACKET = 1 << 20
ORPHAN_SCAN_S = 0.25


# "0": do not import what a candidate's first profiling session imports (torch._dynamo, the inductor);
# otherwise the server does, on CUDA builds with torch's NVML-based CUDA check so that no import initialises
# the driver (on the H200 this cut a forked candidate's first CUDA profiling session from 4.8 s to 0.06 s).
# A server whose forks torch would refuse CUDA after these imports starts itself again without them.
PREIMPORT_ENV = "CUDAGYM_FORK_PREIMPORT"


def wants_preimport() -> bool:
    """Whether this server imports the profiler's modules too (``PREIMPORT_ENV``)."""
    return os.environ.get(PREIMPORT_ENV, "1").strip() != "0"


def warm_up(preimport: bool) -> None:
    """Imports what every candidate needs before its job arrives, without touching CUDA or the profiler.

    Left out on purpose: a profiling session, even a CPU-only one (on the H200 machine a process forked
    after one hung in its own CUDA profiling session), and ``torch.utils.cpp_extension``, whose import asks
    ``torch.cuda.is_available()`` on CUDA builds, which marks every later fork as unable to use CUDA.
    ``preimport`` adds the modules the first profiling session of every candidate would import (about
    1.2 s per candidate on the CI machine)."""
    if preimport:
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # is_available() asks NVML, not the driver
    import torch
    import torch.utils._python_dispatch  # recording aten operators

    from . import candidate  # noqa: F401  (the harness: common, timing, transfer)

    if preimport:
        import torch._dynamo
        import torch._inductor.standalone_compile
        import torch.profiler

    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the fork server; forked candidates could not use it")


def forks_can_use_cuda() -> str:
    """ "" when a process forked from this one could initialise CUDA, else why not (torch marks forks of a
    process that queried the driver as unable to, and raises at their first CUDA call)."""
    pid = os.fork()
    if pid == 0:
        import torch

        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return ""
    return "torch would refuse CUDA in forked processes (the fork server queried the CUDA driver)"


def children_of(pid: int) -> set[int]:
    """Direct children of ``pid`` (its own and re-parented orphans)."""
    found: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.update(int(p) for p in f.read().split())
    except OSError:
        pass
    return found


def become_child(request: Spawn, fds: list[int], server_fds: list[int]) -> NoReturn:
    """In the forked process: the child ``cudagym.harness.child ROLE FD SPEC`` would be. Never returns."""
    try:
        sys.dont_write_bytecode = True  # only the server may write the bytecode cache (cudagym/bytecode.py)
        os.setsid()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
        stdin_fd, stdout_fd, channel_fd = fds
        for fd in server_fds:
            os.close(fd)
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stdout_fd, 2)
        os.close(stdin_fd)
        os.close(stdout_fd)
        os.set_inheritable(channel_fd, True)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True)
        os.environ.clear()
        os.environ.update(request.env)
        tempfile.tempdir = None  # TMPDIR is the candidate's own scratch folder
        if request.cwd:
            os.chdir(request.cwd)
        spec = request.spec
        sys.argv = [os.path.join(os.path.dirname(__file__), "child.py"), request.role, str(channel_fd), spec]
        from . import child

        child.run_role(request.role, channel_fd, json.loads(spec))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


class Server:
    """The fork server's loop (see the module docstring)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: set[int] = set()
        self.read_wake, self.write_wake = os.pipe()
        os.set_blocking(self.write_wake, False)
        signal.set_wakeup_fd(self.write_wake)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes the loop
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ, "request")
        self.selector.register(self.read_wake, selectors.EVENT_READ, "signal")

    def send(self, message: ForkReady | Spawned | Exited) -> None:
        try:
            self.sock.send(json.dumps(encode_tagged(message)).encode())
        except OSError:
            pass  # the client is gone: the loop ends at its EOF

    def spawn(self, request: Spawn, fds: list[int]) -> None:
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            self.send(Spawned(request.id, error=f"expected 3 file descriptors, got {len(fds)}"))
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            become_child(request, fds, [self.sock.fileno(), self.read_wake, self.write_wake, self.selector.fileno()])
        for fd in fds:
            os.close(fd)
        self.children.add(pid)
        self.send(Spawned(request.id, pid=pid))

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.children:
                self.children.discard(pid)
                self.send(Exited(exit=pid, status=status))

    def kill_orphans(self) -> None:
        """Kills processes re-parented to the server (orphaned by a candidate); they never belong here."""
        for pid in children_of(os.getpid()) - self.children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select(timeout=ORPHAN_SCAN_S):
                if key.data == "signal":
                    os.read(self.read_wake, 4096)
                    continue
                try:
                    data, fds, _, _ = socket.recv_fds(self.sock, MAX_PACKET, 3)
                except OSError:
                    data, fds = b"", []
                if not data:
                    self.shutdown()
                try:
                    request = decode_tagged(json.loads(data), (Spawn,))
                except (ValueError, ProtocolError):  # not a request (its client is trusted: a bug, passed over)
                    for fd in fds:
                        os.close(fd)
                    continue
                self.spawn(request, fds)
            self.reap()
            self.kill_orphans()

    def shutdown(self) -> NoReturn:
        for pid in self.children | children_of(os.getpid()):
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        os._exit(0)


def main() -> None:
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # "fork() in a multi-threaded process"
    sock = socket.socket(fileno=int(sys.argv[1]))
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        preimport = wants_preimport()
        warm_up(preimport)
        problem = forks_can_use_cuda()
        if problem and preimport:
            # the extra imports queried the driver: start again as a plain server (same socket, same pid)
            os.environ[PREIMPORT_ENV] = "0"
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
            os.set_inheritable(sock.fileno(), True)
            flags = ["-B"] if sys.flags.dont_write_bytecode else []  # a server that writes bytecode still does
            arguments = launch_arguments("cudagym.harness.forkserver")
            os.execv(sys.executable, [sys.executable, *flags, *arguments, str(sock.fileno())])
        if problem:
            raise RuntimeError(problem)
    except BaseException as exc:
        sock.send(json.dumps(encode_tagged(ForkReady(False, error=f"{type(exc).__name__}: {exc}"))).encode())
        raise
    server = Server(sock)
    server.send(ForkReady(True, pid=os.getpid(), preimported=preimport))
    server.serve()


if __name__ == "__main__":
    main()
