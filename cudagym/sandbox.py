"""Launching evaluation children: a new session, rlimits, a scrubbed environment, a private channel,
bounded output capture, and the whole process group killed on timeout or when done.

This is process isolation, not a security boundary: the children run as the same user as the
environment (see the README's security section).
"""

from __future__ import annotations

import dataclasses
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HARNESS_DIR = Path(__file__).resolve().parent / "harness"
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


@dataclasses.dataclass(frozen=True)
class ChildLimits:
    """Resource limits applied in the child before it starts (None: not limited)."""

    cpu_seconds: int | None = 600
    memory_bytes: int | None = None  # address space; not usable with the CUDA driver
    file_bytes: int | None = 8 * 1024**3
    open_files: int | None = 1024
    processes: int | None = 4096


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
    env.update(extra or {})
    return env


def limits_argument(limits: ChildLimits) -> str:
    """The limits as the child's third argument: JSON ``{"RLIMIT_CPU": seconds, ...}``.

    The child applies them to itself before importing anything (``harness/child.py``), instead of a
    ``preexec_fn``, which is unsafe to run between fork and exec in a multi-threaded parent.
    """
    pairs = {
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_NPROC": limits.processes,
        "RLIMIT_CORE": 0,
    }
    return json.dumps({k: v for k, v in pairs.items() if v is not None})


class OutputCapture:
    """Reads a pipe to its end, keeping at most ``head`` + ``tail`` bytes and counting the rest."""

    def __init__(self, stream: Any, head: int = 32 * 1024, tail: int = 32 * 1024) -> None:
        self._stream, self._head_max, self._tail_max = stream, head, tail
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            chunk = self._stream.read1(65536) if hasattr(self._stream, "read1") else self._stream.read(65536)
            if not chunk:
                break
            self.total += len(chunk)
            room = self._head_max - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self._tail_max:
                    del self.tail[: len(self.tail) - self._tail_max]

    def text(self, wait: float = 2.0) -> str:
        self._thread.join(wait)
        head = self.head.decode("utf-8", errors="replace")
        if not self.tail:
            return head
        omitted = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {omitted} bytes omitted ...]\n" if omitted > 0 else ""
        return head + middle + self.tail.decode("utf-8", errors="replace")


class Child:
    """One harness child process (``role`` is "reference" or "candidate")."""

    def __init__(
        self,
        role: str,
        *,
        limits: ChildLimits,
        threads: int = 0,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        prefix: tuple[str, ...] = (),
    ) -> None:
        read_fd, write_fd = os.pipe()
        self.role = role
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                [
                    *prefix,
                    sys.executable,
                    "-B",
                    str(HARNESS_DIR / "child.py"),
                    role,
                    str(write_fd),
                    limits_argument(limits),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                start_new_session=True,
                env=scrubbed_env(threads, env),
                cwd=str(cwd) if cwd else None,
            )
        finally:
            os.close(write_fd)
        self._channel = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._channel, selectors.EVENT_READ)
        self._eof = False
        self.output = OutputCapture(self.proc.stdout)
        self.messages: list[dict[str, Any]] = []

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
            if self._eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(timeout=remaining):
                return None
            chunk = self._channel.read(65536)
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
        except json.JSONDecodeError:
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
        """Kills the child's whole process group (idempotent)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
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
