"""The clock's hold on a CPU candidate: freezing its processes between its calls, and reading its memory while it is
frozen.

On the cpu backend the candidate shares the machine's cores with the clock, so it could compute beside the clock's
own work (while the clock writes the next inputs, say) unless it is stopped. The clock freezes every process of the
candidate's tree (``SIGSTOP``, which cannot be caught or ignored) whenever it is not the candidate's turn, thaws it
when a handshake starts and freezes it again as soon as the handshake is done: the time the candidate runs is then
exactly the time the clock measures. While frozen, its outputs are read straight from its memory
(``process_vm_readv``): nothing the candidate does after the clock stopped can change what is judged.

Imports only the standard library.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

STOPPED_STATES = frozenset("TtZXx")  # stopped, traced, or already gone


class ProcFiles:
    """Open descriptors of /proc files read again and again (``pread`` on an open file costs a few microseconds,
    opening it anew ten times that: the freeze's latency is inside the timed interval)."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def read(self, path: str) -> bytes:
        fd = self._fds.get(path)
        try:
            if fd is None:
                fd = self._fds[path] = os.open(path, os.O_RDONLY)
            return os.pread(fd, 4096, 0)
        except OSError:
            self.forget(path)
            return b""

    def forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def tree(root: int, files: ProcFiles | None = None) -> list[int]:
    """``root`` and every process below it (processes, not threads)."""
    files = files or ProcFiles()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        for tid in _tasks(pid):
            todo.extend(int(p) for p in files.read(f"/proc/{pid}/task/{tid}/children").split())
    return out


def _stopped(pid: int, files: ProcFiles) -> bool:
    """Whether every thread of ``pid`` is stopped (or gone)."""
    for tid in _tasks(pid):
        stat = files.read(f"/proc/{pid}/task/{tid}/stat")
        state = stat.rsplit(b")", 1)[1].split()[:1] if stat else [b"X"]
        if not state or state[0].decode() not in STOPPED_STATES:
            return False
    return True


class FreezeError(RuntimeError):
    """The candidate's processes could not be stopped in time (or not at all)."""


class Freezer:
    """Freezes and thaws the process tree under ``root`` (a candidate's outermost process)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.frozen: list[int] = []
        self._known: list[int] = []
        self._files = ProcFiles()

    def alive(self) -> bool:
        stat = self._files.read(f"/proc/{self.root}/stat")
        return bool(stat) and stat.rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")

    def freeze(self, timeout: float = 5.0) -> None:
        """Stops every process of the tree and returns once every thread of each is stopped (processes the tree
        forked meanwhile are found and stopped too, until none is left running)."""
        deadline = time.monotonic() + timeout
        stopped: set[int] = set()
        pids = self._known or tree(self.root, self._files)  # the tree as last seen; checked again once stopped
        while True:
            for pid in pids:
                if pid not in stopped:
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except ProcessLookupError:
                        pass
                    stopped.add(pid)
            while not all(_stopped(pid, self._files) for pid in pids):
                if time.monotonic() > deadline:
                    raise FreezeError("the candidate's processes did not stop")
            pids = tree(self.root, self._files)  # a fork before the stop landed: stop the newcomer too
            if set(pids) <= stopped:
                self.frozen = self._known = pids
                return

    def thaw(self) -> None:
        for pid in self.frozen or tree(self.root, self._files):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.frozen = []

    def process_of(self, inner_pid: int) -> int:
        """The process of the tree that calls itself ``inner_pid`` (its id inside its own PID namespace)."""
        for pid in tree(self.root, self._files):
            try:
                with open(f"/proc/{pid}/status") as f:
                    line = next((ln for ln in f if ln.startswith("NSpid:")), "")
            except OSError:
                continue
            ids = line.split()[1:]
            if ids and int(ids[-1]) == inner_pid:
                return pid
        raise LookupError(f"no process {inner_pid} in the candidate's tree")

    def close(self) -> None:
        self._files.close()


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
for _name in ("process_vm_readv", "process_vm_writev"):
    _function = getattr(_libc, _name)
    _function.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    _function.restype = ctypes.c_ssize_t


def _transfer(write: bool, pid: int, local: int, remote: int, nbytes: int) -> None:
    function = _libc.process_vm_writev if write else _libc.process_vm_readv
    done = 0
    while done < nbytes:
        mine = _IoVec(local + done, nbytes - done)
        theirs = _IoVec(remote + done, nbytes - done)
        moved = function(pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0)
        if moved <= 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{'writing' if write else 'reading'} the candidate's memory: {os.strerror(err)}")
        done += moved


def read_memory(pid: int, remote: int, local: int, nbytes: int) -> None:
    """Copies ``nbytes`` at ``remote`` in process ``pid`` to ``local`` here."""
    _transfer(False, pid, local, remote, nbytes)


def write_memory(pid: int, remote: int, local: int, nbytes: int) -> None:
    """Copies ``nbytes`` at ``local`` here to ``remote`` in process ``pid``."""
    _transfer(True, pid, local, remote, nbytes)
