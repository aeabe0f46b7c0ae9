"""The device's memory as a trusted process sees it, and whose shortage an out-of-memory error was.

nvidia-smi, run by the evaluator or the machine pool (processes that run no agent code and hold no CUDA context),
says how much of the device is free and what each compute process there uses (:class:`DeviceReading`). The pool
admits evaluators by it (``cudagym.pool.admission``). A candidate that ran out of device memory is judged by it too
(:func:`shortage`): environments of one GPU that are not in one pool (independent processes, several trainers on
one machine) have only the memory slots between them, which bound how many stages run at once, not what each takes;
so a candidate that asked for a modest amount can find the device filled by other processes. Its error then is the
machine's, not its code's: the stage answers with a harness error (evaluate again) rather than the candidate's
runtime error, and a pool retries it. The candidate's own word (its traceback) only says *that* it ran out; *whose*
shortage it was is read from the device after the candidate's processes have gone (their memory is back): where a
candidate's fair allowance was free then, the shortage was its own.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable

from cudagym.backends import Backend
from cudagym.fault_text import says_out_of_memory
from cudagym.gpu_lock import nvidia_smi_rows, nvidia_smi_selector

GIB = 1 << 30
MIB = 1 << 20
PROCESS_BYTES = GIB  # a CUDA context and what a process loads beside its data: the reference's and a candidate's
# A candidate's own data, in halves of its reference process's peak: a candidate holds its input sets, outputs and their
# poisoned copies, as much data as its reference or more (docs/pool.md has the readings), so three halves of the peak
CANDIDATE_HALVES = 3


@dataclasses.dataclass(frozen=True)
class DeviceReading:
    """One look at the device: its free and total memory and the memory each process there uses (by PID; only
    processes nvidia-smi lists), when it was taken (``time.monotonic()``)."""

    free_bytes: int
    total_bytes: int
    used_by_pid: dict[int, int] = dataclasses.field(default_factory=dict)
    taken: float = dataclasses.field(default_factory=time.monotonic)

    def used(self, pids: Iterable[int]) -> int:
        """What the processes ``pids`` use together (0 for one not listed)."""
        return sum(self.used_by_pid.get(pid, 0) for pid in pids)


MemoryProbe = Callable[[], DeviceReading | None]
"""Reads the device now (:class:`DeviceReading`), or None when it cannot say."""


def nvidia_smi_probe(backend: Backend) -> MemoryProbe:
    """The probe of ``backend``'s GPU through nvidia-smi (``gpu_lock.nvidia_smi_rows``): its free and total memory
    and its compute processes' use."""
    selector = nvidia_smi_selector(backend)

    def read() -> DeviceReading | None:
        memory = nvidia_smi_rows(selector, "--query-gpu=memory.free,memory.total", timeout=5.0)
        try:
            free, total = (int(float(value)) * MIB for value in memory[0][:2]) if memory else (None, None)
        except ValueError:
            return None
        if free is None or total is None:
            return None
        used: dict[int, int] = {}
        for row in nvidia_smi_rows(selector, "--query-compute-apps=pid,used_memory", timeout=5.0) or []:
            try:
                used[int(row[0])] = int(float(row[1])) * MIB
            except (ValueError, IndexError):
                continue  # "[N/A]" where the driver does not say
        return DeviceReading(free, total, used)

    return read


def candidate_allowance(reference_peak: int | None) -> int:
    """The device memory a candidate may count on: a CUDA context and its own data, one and a half times what its
    task's reference process reserved at most (``PROCESS_BYTES`` alone while that is unknown)."""
    return PROCESS_BYTES + (reference_peak or 0) * CANDIDATE_HALVES // 2


def shortage(error: str, reading: DeviceReading | None, reference_peak: int | None) -> str | None:
    """Why the candidate's out-of-memory ``error`` was the machine's shortage, or None when it was the candidate's
    own (or ``error`` says nothing of memory). ``reading``: the device read after the candidate's processes ended
    (None: it could not be read, and the error stays the candidate's, as it said); ``reference_peak``: the most its
    task's reference process reserved. The shortage is the machine's when less than the candidate's allowance
    (:func:`candidate_allowance`) was free even with the candidate gone: other processes held the device."""
    if reading is None or not says_out_of_memory(error):
        return None
    allowance = candidate_allowance(reference_peak)
    if reading.free_bytes >= allowance:
        return None
    return (
        f"The device ran out of memory for a reason outside the candidate: with it gone, other processes left "
        f"{reading.free_bytes / GIB:.1f} of {reading.total_bytes / GIB:.0f} GiB free, less than the "
        f"{allowance / GIB:.1f} GiB a candidate of this task may use. Not counted against the code: evaluate again."
    )
