"""What a CPU candidate's calls cost in processor time, read from the kernel's accounting rather than a wall clock.

On a shared host (several environments per machine, a compiler next door, a test runner's other worker) the wall
time between thawing a candidate and freezing it again holds every moment it waited for a core, and the clock's own
wake-ups besides: on a 2-core machine under load a 10 us ReLU read as milliseconds. The kernel accounts, per thread,
the time the thread actually ran (``/proc/<pid>/task/<tid>/schedstat``, the scheduler's own clock) and, per process,
the time all its threads ran, the exited ones included (the process's CPU-time clock); neither is written by the
candidate. The clock reads both while the candidate is frozen (so every figure is settled: a stopped thread's
account is up to date) before it thaws it and after it froze it again, and charges the handshake

    max(the busiest thread's run time, the run time of all threads together / P)

where P is the number of threads the candidate may use (its ``threads``). The first term is what a call that runs on
one thread takes without waiting for a core; the second is a floor that no split of the work can get under: work
spread over more threads than P, or moved to threads while the one that answers sleeps, is charged as if P cores
did it in perfect parallel. Work in a process that ends during the handshake is in no clock that can be read
afterwards, so a handshake in which a process of the tree appeared or ended is charged its wall-clock interval
instead (``Spent.tree_changed``); a child that appeared and was waited for between two snapshots shows only in its
parent's account of reaped children's run time (``/proc/<pid>/stat``'s cutime and cstime), which counts the same.

Eager PyTorch in the trusted reference process is charged its calling thread's run time (``time.thread_time``), the
same first term: the reference runs no agent code, so no floor is needed. Imports only the standard library and
the freezer (a sibling).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import time

from .freezer import ProcFiles

_libc = ctypes.CDLL(None, use_errno=True)


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Run times in nanoseconds: per thread (``(pid, tid)``) and per process (all its threads, exited ones too)."""

    threads: dict[tuple[int, int], int]
    processes: dict[int, int]
    faults: int = 0  # page faults of the processes so far (minor and major): a diagnosis, not charged separately
    pids: frozenset[int] = frozenset()  # the processes of the tree
    reaped: int = 0  # run time, in clock ticks, of the children the tree's processes have waited for so far


@dataclasses.dataclass(frozen=True)
class Spent:
    """What a handshake cost the candidate's processes, in microseconds (see the module docstring)."""

    busiest_us: float  # the run time of the thread that ran longest
    total_us: float  # the run time of every thread of every process together
    threads: int  # P: the threads the candidate may use
    faults: int = 0  # page faults taken meanwhile (their handling is run time, already in the figures above)
    # a process of the tree appeared or ended meanwhile, or one's clock could not be read: work done in a process
    # that ended is in no clock the snapshots read, so such a handshake is charged its interval instead
    # (``Clock.measured_us``)
    tree_changed: bool = False

    @property
    def charged_us(self) -> float:
        return max(self.busiest_us, self.total_us / max(1, self.threads))


class TreeTimes:
    """Reads the run times of a set of processes' threads (keeps the ``/proc`` files and clocks it opened)."""

    def __init__(self) -> None:
        self._files = ProcFiles()
        self._clocks: dict[int, int] = {}

    def available(self, pid: int) -> bool:
        """Whether this kernel accounts per-thread run times and lets this process read ``pid``'s CPU clock."""
        return bool(self._files.read(f"/proc/{pid}/schedstat")) and self._process_ns(pid) is not None

    def snapshot(self, pids: list[int]) -> Snapshot:
        """The run times of every thread of ``pids`` and of each process, now (call while they are stopped)."""
        threads: dict[tuple[int, int], int] = {}
        processes: dict[int, int] = {}
        faults = reaped = 0
        for pid in pids:
            stat = self._files.read(f"/proc/{pid}/stat").rsplit(b")", 1)[-1].split()
            if len(stat) > 10:
                faults += int(stat[7]) + int(stat[9])  # minflt, majflt (fields 10 and 12)
            if len(stat) > 14:
                reaped += int(stat[13]) + int(stat[14])  # cutime, cstime (fields 16 and 17)
            try:
                tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except OSError:
                continue
            for tid in tids:
                fields = self._files.read(f"/proc/{pid}/task/{tid}/schedstat").split()
                if fields:
                    threads[(pid, tid)] = int(fields[0])
            total = self._process_ns(pid)
            if total is not None:
                processes[pid] = total
        return Snapshot(threads, processes, faults, frozenset(pids), reaped)

    def _process_ns(self, pid: int) -> int | None:
        clock = self._clocks.get(pid)
        if clock is None:
            out = ctypes.c_int()
            if _libc.clock_getcpuclockid(pid, ctypes.byref(out)) != 0:
                return None
            clock = self._clocks[pid] = out.value
        try:
            return time.clock_gettime_ns(clock)
        except OSError:
            self._clocks.pop(pid, None)
            return None

    def close(self) -> None:
        self._files.close()
        self._clocks.clear()


def spent(before: Snapshot, after: Snapshot, threads: int) -> Spent:
    """What ran between two snapshots (threads and processes that appeared in between count from zero)."""
    busiest = max((ns - before.threads.get(key, 0) for key, ns in after.threads.items()), default=0)
    total = sum(ns - before.processes.get(pid, 0) for pid, ns in after.processes.items())
    faults = max(0, after.faults - before.faults)
    unread = any(pid not in snapshot.processes for snapshot in (before, after) for pid in snapshot.pids)
    # a child that was created, worked and was waited for between the snapshots is in neither tree: only its
    # parent's account of reaped children shows it
    changed = before.pids != after.pids or unread or after.reaped != before.reaped
    return Spent(max(0, busiest) / 1e3, max(0, total) / 1e3, threads, faults, changed)
