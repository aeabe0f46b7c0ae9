"""Launching evaluation children: a new session, rlimits, a scrubbed environment, a private channel,
bounded output capture, and the whole process group killed on timeout or when done, together with every
process below it and every process that still carries the child's ``CUDAGYM_SANDBOX_ID``.

Candidate processes (the agent's code) also get a private scratch folder as HOME and TMPDIR, a private
exchange folder and, where the machine allows unprivileged user namespaces, their own network, PID and mount
namespaces: no network, nothing left running after them, a read-only file system outside their own folders
and a /dev/shm of their own (``ChildLimits``, ``isolation_status()``, in ``cudagym.isolation``; entered by
``harness/child.py`` before anything else runs in the child). Without a PID namespace a guard process, the
candidate's child subreaper, adopts what it orphans, and ``Child.kill`` kills everything below the child's
first process before that process itself.

This is process isolation, not a security boundary: the children run as the same user as the
environment (see the README's security section).
"""

from __future__ import annotations

import glob
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cudagym import bytecode
from cudagym.harness.child import kill_below
from cudagym.isolation import (  # re-exported: the names callers import from cudagym.sandbox
    AUTO,
    CHILD_PREFIX,
    HARNESS_DIR,
    RESERVED_PIDS,
    SHM_DIR,
    ChildLimits,
    Isolation,
    IsolationStatus,
    child_spec,
    harness_module,
    isolation_status,
    network_isolation_available,
    resolve_isolation,
)

if TYPE_CHECKING:
    from cudagym.forkserver import ForkedProcess, ForkServer

__all__ = [
    "AUTO",
    "CHILD_PREFIX",
    "ENV_ALLOW",
    "EXCHANGE_PREFIX",
    "HARNESS_DIR",
    "RESERVED_PIDS",
    "SANDBOX_ID",
    "SHM_DIR",
    "WRITABLE_ENV",
    "Child",
    "ChildLimits",
    "Isolation",
    "IsolationStatus",
    "OutputCapture",
    "child_spec",
    "default_memory_bytes",
    "exchange_dir",
    "harness_module",
    "isolation_status",
    "kill_below",
    "network_isolation_available",
    "resolve_isolation",
    "sandbox_processes",
    "scrubbed_env",
    "sees_gpu",
    "signal_name",
]

ENV_ALLOW = (
    "PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)
SANDBOX_ID = "CUDAGYM_SANDBOX_ID"  # carried by every child process (and inherited by whatever it starts)
WRITABLE_ENV = ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR")  # cache folders a candidate may write to
EXCHANGE_PREFIX = "cudagym-x-"  # a candidate's private exchange folder
KILL_WAIT_S = 5.0  # how long kill() keeps killing what a child left before it gives up
RECEIVE_SLICE_S = 0.25  # how often a reader waiting on the channel looks for a kill from another thread


def exchange_dir() -> str:
    """Where the evaluator's input and output files travel: RAM-backed /dev/shm when it is there (the
    rule of ``cudagym.evaluator``; candidates may write here)."""
    if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK):
        return SHM_DIR
    return tempfile.gettempdir()


def sees_gpu(env: dict[str, str]) -> bool:
    """Whether a process with environment ``env`` would see an NVIDIA device."""
    if env.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def default_memory_bytes() -> int:
    """Half the machine's physical memory: the address-space cap of CPU candidates by default."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


def scrubbed_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """An allow-listed environment: no secrets, C locale (ASCII diagnostics), fixed thread counts."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.update(
        LC_ALL="C",
        LANG="C",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONHASHSEED="0",
        HOME=os.environ.get("HOME", "/tmp"),
        TMPDIR=os.environ.get("TMPDIR", "/tmp"),
    )
    if threads > 0:
        env["OMP_NUM_THREADS"] = str(threads)
        env["MKL_NUM_THREADS"] = str(threads)
        # OpenMP threads that wait sleep rather than spin: on a busy host a spinning thread holds the core the thread
        # it waits for needs (small parallel ops then take milliseconds), and a spin is run time that the trusted
        # clock would charge (harness/cputime.py); the candidate and eager wait alike
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    env.update(extra or {})
    return env


def sandbox_processes(sandbox_id: str = "") -> list[int]:
    """Live processes that carry ``CUDAGYM_SANDBOX_ID`` starting with ``sandbox_id`` in their environment
    (default: those of every child this process started). Zombies, having no environment, are not listed."""
    needle = f"{SANDBOX_ID}={sandbox_id or f'{os.getpid()}-'}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ and any(v.startswith(needle) for v in environ.split(b"\0")):
            found.append(int(entry))
    return found


def _abandon(
    owner: int, proc: subprocess.Popen[bytes] | ForkedProcess, sandbox_id: str, folders: tuple[str, ...]
) -> None:
    """What ``Child.kill`` does, for a child nobody killed: what is below it, its group (while the process is not
    yet reaped, its id is still its own), whatever carries its sandbox id, and its private folders. Only in the
    process that started it (not in a fork of that process)."""
    if os.getpid() != owner:
        return
    if proc.poll() is None:
        kill_below(proc.pid, KILL_WAIT_S)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _kill_all(sandbox_processes(sandbox_id))
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class OutputCapture:
    """Reads a pipe to its end and closes it, keeping at most ``head`` + ``tail`` bytes and counting the rest."""

    def __init__(self, stream: Any, head: int = 32 * 1024, tail: int = 32 * 1024) -> None:
        self._stream, self._head_max, self._tail_max = stream, head, tail
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            self._read_to_end()
        finally:
            # the pipe is done with once its writers are gone: closed here, not left for the garbage collector
            # (an unclosed pipe is a ResourceWarning, and a file descriptor held until then)
            try:
                self._stream.close()
            except OSError:
                pass

    def _read_to_end(self) -> None:
        while True:
            try:
                chunk = self._stream.read1(1 << 20) if hasattr(self._stream, "read1") else self._stream.read(1 << 20)
            except (OSError, ValueError):  # closed under us
                break
            if not chunk:
                break
            self.total += len(chunk)
            room = self._head_max - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if len(chunk) >= self._tail_max:
                self.tail = bytearray(chunk[len(chunk) - self._tail_max :])
            elif chunk:
                self.tail += chunk
                if len(self.tail) > self._tail_max:
                    del self.tail[: len(self.tail) - self._tail_max]

    def text(self, wait: float = 2.0) -> str:
        """The head and the tail; when bytes were dropped between them, a marker there and a last line
        that says how much the process wrote in all (a cut of this text keeps its end)."""
        self._thread.join(wait)
        head = self.head.decode("utf-8", errors="replace")
        if not self.tail:
            return head
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted <= 0:
            return head + self.tail.decode("utf-8", errors="replace")
        return (
            f"{head}\n[... {omitted} bytes omitted ...]\n{self.tail.decode('utf-8', errors='replace')}\n"
            f"[the process wrote {self.total} bytes of output; {omitted} bytes in the middle were dropped]"
        )


class Child:
    """One harness child process (``role`` is "reference" or "candidate").

    Every child carries ``CUDAGYM_SANDBOX_ID`` in its environment, so that ``kill`` finds what it left
    behind. A candidate also gets a private scratch folder as HOME and TMPDIR and a private ``exchange`` folder
    (in RAM-backed /dev/shm where there is one) through which the trusted side hands it the stage's files (both
    removed by ``kill``), the address-space cap of ``ChildLimits.memory_bytes``, the namespaces of ``isolation``
    and, without a PID namespace, a guard (``harness/child.py``).

    Of the real /dev/shm a candidate writes only its own ``exchange`` folder; where its file system is read-only
    its /dev/shm is a private one (``Isolation.private_shm``) into which only that folder is bound.

    With a ``launcher`` (``cudagym.forkserver.ForkServer``) the child is forked from that warm server
    instead of started as a new interpreter (``forked`` says which); a ``prefix`` (a wrapper such as ncu)
    always gets a new interpreter.
    """

    def __init__(
        self,
        role: str,
        *,
        limits: ChildLimits,
        threads: int = 0,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        prefix: tuple[str, ...] = (),
        launcher: ForkServer | None = None,
    ) -> None:
        self.role = role
        self.started = time.monotonic()
        self.sandbox_id = f"{os.getpid()}-{secrets.token_hex(8)}"
        self.scratch = tempfile.mkdtemp(prefix=f"{CHILD_PREFIX}{os.getpid()}-") if role == "candidate" else None
        self.exchange = (
            tempfile.mkdtemp(prefix=f"{EXCHANGE_PREFIX}{os.getpid()}-", dir=exchange_dir())
            if role == "candidate"
            else None
        )
        child_env = scrubbed_env(threads, env)
        child_env[SANDBOX_ID] = self.sandbox_id
        if self.scratch is not None:
            child_env.update(HOME=self.scratch, TMPDIR=self.scratch)
        gpu = sees_gpu(child_env)
        self.memory_bytes = limits.memory_bytes
        if self.memory_bytes == AUTO:
            self.memory_bytes = default_memory_bytes() if role == "candidate" and not gpu else None
        writable = [
            self.scratch or "",
            self.exchange or "",
            *(child_env.get(name, "") for name in WRITABLE_ENV),
        ]
        self.isolation = resolve_isolation(
            limits, role=role, env=child_env, prefix=prefix, writable=tuple(w for w in writable if w)
        )
        spec = child_spec(limits, role=role, memory_bytes=self.memory_bytes, isolation=self.isolation)
        self.forked = launcher is not None and not prefix
        try:
            if self.forked:
                assert launcher is not None
                self.proc: subprocess.Popen[bytes] | ForkedProcess = launcher.spawn(
                    role, spec, env=child_env, cwd=str(cwd) if cwd else None
                )
                read_fd = self.proc.channel
            else:
                read_fd, self.proc = self._popen(role, spec, child_env, cwd, prefix)
        except BaseException:
            for folder in self._folders:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        self._channel = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._channel, selectors.EVENT_READ)
        self._eof = False
        self.killed = False  # kill() ran: nothing of this child is left
        # a Child dropped without kill() (or alive when the interpreter exits) still takes its processes and
        # its scratch folder with it
        self._finalizer = weakref.finalize(self, _abandon, os.getpid(), self.proc, self.sandbox_id, self._folders)
        self.output = OutputCapture(self.proc.stdout)
        self.messages: list[dict[str, Any]] = []

    @property
    def _folders(self) -> tuple[str, ...]:
        """The private folders of this child (scratch and exchange), removed with it."""
        return tuple(f for f in (self.scratch, self.exchange) if f is not None)

    @staticmethod
    def _popen(
        role: str, spec: str, env: dict[str, str], cwd: str | Path | None, prefix: tuple[str, ...]
    ) -> tuple[int, subprocess.Popen[bytes]]:
        """A freshly started interpreter running ``cudagym.harness.child``; returns (channel read end, process)."""
        read_fd, write_fd = os.pipe()
        # the trusted reference process writes the bytecode cache it is given (cudagym/bytecode.py); others read
        flags, env = bytecode.launch(env, writer=role == "reference")
        try:
            proc = subprocess.Popen(
                [*prefix, sys.executable, *flags, *harness_module("child"), role, str(write_fd), spec],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                env=env,
                cwd=str(cwd) if cwd else None,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return read_fd, proc

    def send(self, payload: dict[str, Any], *, close_stdin: bool = False) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(payload) + "\n").encode())
            self.proc.stdin.flush()
            if close_stdin:
                self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the child died; receive() reports it

    def receive(self, deadline: float) -> dict[str, Any] | None:
        """The next channel message, or None at end of channel or when ``deadline`` (monotonic) passes."""
        while b"\n" not in self._buffer:
            if self._eof or self.killed:  # a kill from another thread ends the channel for a reader waiting here
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                # in slices: closing a file another thread waits on never wakes that thread's wait, so a reader
                # looks again for a kill (``killed``) at least every ``RECEIVE_SLICE_S``
                if not self._selector.select(timeout=min(remaining, RECEIVE_SLICE_S)):
                    continue
                chunk = self._channel.read(65536)
            except (OSError, ValueError):  # the channel was closed by a kill meanwhile
                self._eof = True
                continue
            if not chunk:
                self._eof = True
                continue
            self._buffer += chunk
            if len(self._buffer) > 16 * 1024 * 1024:
                self._eof = True
                self._buffer = b""
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            message = None
        if not isinstance(message, dict):  # every message of the protocol is an object
            return {"garbled": line[:200].decode("utf-8", errors="replace")}
        self.messages.append(message)
        return message

    def receive_all(self, deadline: float) -> bool:
        """Reads messages until the channel closes; False when ``deadline`` passed first."""
        while True:
            message = self.receive(deadline)
            if message is None:
                return self._eof
            if time.monotonic() > deadline:
                return False

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout=max(timeout, 0.01))
        except subprocess.TimeoutExpired:
            return None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kills everything the child started, then the child's process group, and removes its private folders
        (idempotent).

        What is below the child's first process goes first, while that process (the guard of a candidate
        without a PID namespace, which adopts what the candidate orphans) still holds it: so a process that
        left the session, double-forked and cleared its environment is killed too. Inside a PID namespace the
        kernel kills what is left once the namespace's init dies. Then whatever still carries
        ``CUDAGYM_SANDBOX_ID`` in its environment (processes that left the tree some other way) is killed
        until none is left.
        """
        if not self.killed and self.proc.poll() is None:
            kill_below(self.proc.pid, KILL_WAIT_S)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if not self.killed:
            self.killed = True
            deadline = time.monotonic() + KILL_WAIT_S
            while (left := sandbox_processes(self.sandbox_id)) and time.monotonic() < deadline:
                _kill_all(left)
                time.sleep(0.01)
            self._finalizer.detach()
            for folder in self._folders:
                shutil.rmtree(folder, ignore_errors=True)
        for stream in (self.proc.stdin, self._channel):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self._selector.close()
        except (OSError, KeyError):
            pass


def signal_name(returncode: int | None) -> str:
    """ "SIGSEGV" for a child killed by signal 11, "" otherwise."""
    if returncode is None or returncode >= 0:
        return ""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"
