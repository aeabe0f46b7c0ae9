"""Launching evaluation children: a new session, rlimits, a scrubbed environment, a private channel,
bounded output capture, and the whole process group killed on timeout or when done, together with every
process that still carries the child's ``CUDAGYM_SANDBOX_ID``.

Candidate processes (the agent's code) also get a private scratch folder as HOME and TMPDIR and, where
the machine allows unprivileged user namespaces, their own network, PID and mount namespaces: no network,
nothing left running after them, a read-only file system outside their scratch (``ChildLimits``,
``isolation_status()``; entered by ``harness/child.py`` before anything else runs in the child).

This is process isolation, not a security boundary: the children run as the same user as the
environment (see the README's security section).
"""

from __future__ import annotations

import dataclasses
import functools
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
from typing import TYPE_CHECKING, Any, Literal

from cudagym import bytecode

if TYPE_CHECKING:
    from cudagym.forkserver import ForkedProcess, ForkServer

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
AUTO = "auto"
SANDBOX_ID = "CUDAGYM_SANDBOX_ID"  # carried by every child process (and inherited by whatever it starts)
WRITABLE_ENV = ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR")  # cache folders a candidate may write to
CHILD_PREFIX = "cudagym-child-"
RESERVED_PIDS = 300  # a PID namespace's pid_max is set this far above the candidate's task allowance


@dataclasses.dataclass(frozen=True)
class ChildLimits:
    """Limits and isolation of the evaluation children (None: not limited).

    ``memory_bytes`` caps the address space (RLIMIT_AS). ``"auto"``: half the machine's memory for
    candidate processes that see no NVIDIA device (the CUDA driver reserves far more address space than
    it uses, so it cannot run under RLIMIT_AS), none for the reference and for GPU candidates.

    ``processes`` is how many tasks (processes and threads) a candidate may add to what it starts with:
    RLIMIT_NPROC is set that far above the current count (see ``harness/child.py``). RLIMIT_NPROC does
    not bind root (uid 0), so in a PID namespace its pid_max is set too (Linux 6.14 and later), which
    bounds the tasks in it at ``processes`` + RESERVED_PIDS whatever the uid. The reference process is
    not limited so (``torch.compile`` starts a pool of compiler workers there).

    The three isolation switches apply to candidate processes only (the reference process is trusted),
    and only where the machine allows them (``isolation_status()``; an unavailable one is recorded in
    ``Child.isolation.notes``, never an error). ``True`` or ``"auto"`` (the default): on; ``False``: off.
    They hold for GPU candidates too (the CUDA driver, CUDA IPC with the reference process and nvcc-built
    extensions work inside them: ``tests/gpu/test_isolation.py``):

    * ``isolate_network``: a user and a network namespace with no interface up, so no connection can
      be made (not even to this machine's loopback);
    * ``isolate_processes``: a PID namespace (with its own /proc where the machine allows it): when the
      candidate ends or is killed, every process it started dies with it, even one that called setsid;
    * ``readonly_filesystem``: a mount namespace in which everything is read-only except the candidate's
      private scratch folder (its HOME and TMPDIR), the folder evaluation files travel through and the
      cache folders named in WRITABLE_ENV (/dev, /proc and /sys are left as they are).
    """

    cpu_seconds: int | None = 600
    memory_bytes: int | Literal["auto"] | None = AUTO
    file_bytes: int | None = 8 * 1024**3
    open_files: int | None = 1024
    processes: int | None = 1024
    isolate_network: bool | Literal["auto"] = AUTO
    isolate_processes: bool | Literal["auto"] = AUTO
    readonly_filesystem: bool | Literal["auto"] = AUTO


@dataclasses.dataclass(frozen=True)
class IsolationStatus:
    """What this machine allows an unprivileged process: per step, "" when it works, else why not."""

    user: str
    network: str
    readonly: str
    pids: str
    proc: str
    pid_max: str

    def works(self, step: str) -> bool:
        return getattr(self, step) == ""


@dataclasses.dataclass(frozen=True)
class Isolation:
    """What one child process got beyond its rlimits."""

    network: bool = False  # in its own network namespace: no connection leaves it
    processes: bool = False  # in its own PID namespace: everything it starts dies with it
    private_proc: bool = False  # sees only its own processes in /proc
    readonly_filesystem: bool = False  # can write only to ``writable``
    writable: tuple[str, ...] = ()
    pid_max: int | None = None  # bounds the processes and threads in its PID namespace (whatever the uid)
    notes: tuple[str, ...] = ()  # why a switch that was on (or "auto") was not applied

    @property
    def any(self) -> bool:
        return self.network or self.processes or self.readonly_filesystem

    def summary(self) -> str:
        """One line for a report: what is on, then what is missing and why."""
        names = [("network namespace", self.network), ("PID namespace", self.processes)]
        names += [(f"pid_max {self.pid_max}", self.pid_max is not None)]
        names += [("private /proc", self.private_proc), ("read-only file system", self.readonly_filesystem)]
        text = ", ".join(n for n, on in names if on) or "no namespaces"
        return text + ("; " + "; ".join(self.notes) if self.notes else "")


def exchange_dir() -> str:
    """Where the evaluator's input and output files travel: RAM-backed /dev/shm when it is there (the
    rule of ``cudagym.evaluator``; candidates may write here)."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def sees_gpu(env: dict[str, str]) -> bool:
    """Whether a process with environment ``env`` would see an NVIDIA device."""
    if env.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def default_memory_bytes() -> int:
    """Half the machine's physical memory: the address-space cap of CPU candidates by default."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


@functools.lru_cache(maxsize=1)
def isolation_status() -> IsolationStatus:
    """Which namespaces a child can enter here, found once per process by a probe child that tries them
    all (a fraction of a second). Containers often forbid user namespaces: then every step says why."""
    steps = ("user", "network", "readonly", "pids", "proc", "pid_max")
    scratch = tempfile.mkdtemp(prefix=CHILD_PREFIX + "probe-")
    spec = {step: True for step in steps} | {"writable": [scratch], "pid_max": RESERVED_PIDS + 1024}
    command = [sys.executable, "-B", str(HARNESS_DIR / "child.py"), "probe", "-", json.dumps(spec)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=30, env=scrubbed_env(0), start_new_session=True
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
        reasons = {step: str(found.get(step, "not reported by the probe")) for step in steps}
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        reasons = {step: f"the probe failed: {exc}" for step in steps}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return IsolationStatus(**reasons)


def network_isolation_available() -> tuple[bool, str]:
    """(whether candidate processes can run without network access here, and in words why or why not)."""
    status = isolation_status()
    if status.works("network"):
        return True, "candidate processes can run in their own network namespace (no interface up)"
    return False, f"no network namespace for candidate processes: {status.network}"


def resolve_isolation(
    limits: ChildLimits, *, role: str, env: dict[str, str], prefix: tuple[str, ...], writable: tuple[str, ...]
) -> Isolation:
    """The isolation a child gets: the switches in ``limits``, resolved against this machine."""
    switches = {
        "network": limits.isolate_network,
        "processes": limits.isolate_processes,
        "readonly_filesystem": limits.readonly_filesystem,
    }
    if role != "candidate" or not any(on is not False for on in switches.values()):
        return Isolation()
    wanted = {name: on is not False for name, on in switches.items()}
    notes: list[str] = []
    if prefix:
        notes.append(f"no namespaces for a run wrapped by {Path(prefix[0]).name} (it needs the host's)")
        return Isolation(notes=tuple(notes))
    status = isolation_status()
    step_of = {"network": "network", "processes": "pids", "readonly_filesystem": "readonly"}
    granted = {}
    for name, want in wanted.items():
        works = status.works("user") and status.works(step_of[name])
        granted[name] = want and works
        if want and not works:
            notes.append(f"no {name.replace('_', ' ')}: {getattr(status, step_of[name]) or status.user}")
    pid_max = None  # PIDs 1 and 2 are the reaper and the candidate; then the allowance, and RESERVED_PIDS
    if granted["processes"] and limits.processes is not None and status.works("pid_max"):
        pid_max = RESERVED_PIDS + 3 + limits.processes
    return Isolation(
        network=granted["network"],
        processes=granted["processes"],
        pid_max=pid_max,
        private_proc=granted["processes"] and status.works("proc"),
        readonly_filesystem=granted["readonly_filesystem"],
        writable=writable if granted["readonly_filesystem"] else (),
        notes=tuple(notes),
    )


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


def child_spec(limits: ChildLimits, *, role: str, memory_bytes: int | None, isolation: Isolation) -> str:
    """The child's third argument (JSON): its rlimits, its task allowance and the sandbox to enter.

    The child applies them to itself before importing anything (``harness/child.py``), instead of a
    ``preexec_fn``, which is unsafe to run between fork and exec in a multi-threaded parent.
    """
    pairs = {
        "RLIMIT_CPU": limits.cpu_seconds,
        "RLIMIT_AS": memory_bytes,
        "RLIMIT_FSIZE": limits.file_bytes,
        "RLIMIT_NOFILE": limits.open_files,
        "RLIMIT_CORE": 0,
    }
    sandbox: dict[str, Any] = {}
    if isolation.any:
        sandbox = {
            "user": True,
            "network": isolation.network,
            "readonly": isolation.readonly_filesystem,
            "writable": list(isolation.writable),
            "pids": isolation.processes,
            "proc": isolation.private_proc,
            "pid_max": isolation.pid_max,
        }
    return json.dumps(
        {
            "rlimits": {k: v for k, v in pairs.items() if v is not None},
            "processes": limits.processes if role == "candidate" else None,
            "sandbox": sandbox,
        }
    )


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


def _descendants(pid: int) -> list[int]:
    """Processes below ``pid`` in the process tree, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _abandon(owner: int, proc: subprocess.Popen[bytes] | ForkedProcess, sandbox_id: str, scratch: str | None) -> None:
    """What ``Child.kill`` does, for a child nobody killed: its group (while the process is not yet reaped,
    its id is still its own), whatever carries its sandbox id, and its scratch folder. Only in the process
    that started it (not in a fork of that process)."""
    if os.getpid() != owner:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    _kill_all(sandbox_processes(sandbox_id))
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class OutputCapture:
    """Reads a pipe to its end, keeping at most ``head`` + ``tail`` bytes and counting the rest."""

    def __init__(self, stream: Any, head: int = 32 * 1024, tail: int = 32 * 1024) -> None:
        self._stream, self._head_max, self._tail_max = stream, head, tail
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            chunk = self._stream.read1(1 << 20) if hasattr(self._stream, "read1") else self._stream.read(1 << 20)
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
    behind. A candidate also gets a private scratch folder as HOME and TMPDIR (removed by ``kill``), the
    address-space cap of ``ChildLimits.memory_bytes`` and the namespaces of ``isolation``.

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
        child_env = scrubbed_env(threads, env)
        child_env[SANDBOX_ID] = self.sandbox_id
        if self.scratch is not None:
            child_env.update(HOME=self.scratch, TMPDIR=self.scratch)
        gpu = sees_gpu(child_env)
        self.memory_bytes = limits.memory_bytes
        if self.memory_bytes == AUTO:
            self.memory_bytes = default_memory_bytes() if role == "candidate" and not gpu else None
        writable = [self.scratch or "", exchange_dir(), *(child_env.get(name, "") for name in WRITABLE_ENV)]
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
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
            raise
        self._channel = os.fdopen(read_fd, "rb", buffering=0)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._channel, selectors.EVENT_READ)
        self._eof = False
        self.killed = False  # kill() ran: nothing of this child is left
        # a Child dropped without kill() (or alive when the interpreter exits) still takes its processes and
        # its scratch folder with it
        self._finalizer = weakref.finalize(self, _abandon, os.getpid(), self.proc, self.sandbox_id, self.scratch)
        self.output = OutputCapture(self.proc.stdout)
        self.messages: list[dict[str, Any]] = []

    @staticmethod
    def _popen(
        role: str, spec: str, env: dict[str, str], cwd: str | Path | None, prefix: tuple[str, ...]
    ) -> tuple[int, subprocess.Popen[bytes]]:
        """A freshly started interpreter running ``child.py``; returns (channel read end, process)."""
        read_fd, write_fd = os.pipe()
        # the trusted reference process writes the bytecode cache it is given (cudagym/bytecode.py); others read
        flags, env = bytecode.launch(env, writer=role == "reference")
        try:
            proc = subprocess.Popen(
                [*prefix, sys.executable, *flags, str(HARNESS_DIR / "child.py"), role, str(write_fd), spec],
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
        """Kills the child's process group and everything it started, then removes its scratch folder
        (idempotent).

        Inside a PID namespace the kernel kills what is left once the namespace's init dies. Without
        one, processes that left the group (``setsid``) are found by their place in the process tree and
        by ``CUDAGYM_SANDBOX_ID`` in their environment, and killed until none is left.
        """
        tree = _descendants(self.proc.pid) if not self.killed and self.proc.poll() is None else []
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _kill_all(tree)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if not self.killed:
            self.killed = True
            deadline = time.monotonic() + 5
            while (left := sandbox_processes(self.sandbox_id)) and time.monotonic() < deadline:
                _kill_all(left)
                time.sleep(0.01)
            self._finalizer.detach()
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
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
