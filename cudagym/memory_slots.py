"""Memory slots: how many environments of one GPU may be inside a verify or a profile at once.

A verify or a profile of a GPU-sized task holds several copies of the task's tensors in the reference process
(its private inputs, the shared input and output buffers, the reference output, check 1 kept for the
determinism repeat) and one more in the candidate: near 10 GiB for the built-in tasks' 1 GiB tensors on the H200.
Sixteen environments that reached verify together (as every environment does at the start of a run) asked for
160 GiB and ran the 141 GiB device out of memory. Between stages a reference process gives back what it does not
keep (``drop``), so what needs a bound is how many environments are inside such a stage at once: each stage
takes one of ``slots`` memory slots of its device first.

A memory slot is an exclusive ``flock`` on one of ``slots`` files in the machine's lock folder
(``gpu_lock.lock_folder``), named after the
device (``gpu_lock.device_identity``), so the bound holds across the threads of one evaluation service and across
processes, and a process that dies gives its slot back. A stage takes its memory slot before any device slot
(``gpu_lock``), and a holder of the exclusive timing slot never waits for a memory slot, so the two cannot
deadlock. Whether they lock follows the device slots (``gpu_lock.locking_enabled``: on for cuda).
"""

from __future__ import annotations

import contextlib
import fcntl
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from cudagym.backends import Backend
from cudagym.gpu_lock import (
    TimingSlotTimeout,
    device_identity,
    lock_file,
    lock_folder,
    locking_enabled,
    nvidia_smi_selector,
    query_gpu_field,
)

GIB_PER_SLOT = 20  # "auto": one slot per this much device memory (7 on an H200)
_held = threading.local()  # per thread: the devices whose memory slot it holds (nested use takes no second one)


def auto_slots(backend: Backend) -> int:
    """The slot count ``"auto"`` means: on cuda one per ``GIB_PER_SLOT`` GiB of the device's memory, at least 1
    (4 when nvidia-smi cannot say); on cpu 0, no bound (the host's memory is the candidate's rlimit's business)."""
    if not backend.is_cuda:
        return 0
    mib = query_gpu_field(nvidia_smi_selector(backend), "memory.total")
    try:
        return max(1, int(float(mib) / 1024 // GIB_PER_SLOT)) if mib else 4
    except ValueError:
        return 4


@contextlib.contextmanager
def memory_slot(
    backend: Backend, cache_dir: str | Path, slots: int, *, timeout: float, enabled: bool | None = None
) -> Iterator[float]:
    """Holds one of the device's ``slots`` memory slots for the ``with`` block; yields the seconds it waited.

    ``slots`` 0 or locking off: no bound (yields 0). Raises TimingSlotTimeout (a RuntimeError, reported as a
    harness error) when no slot is free within ``timeout`` seconds."""
    key = device_identity(backend)
    held: set[str] = _held.__dict__.setdefault("devices", set())
    if slots <= 0 or not locking_enabled(backend, enabled) or key in held:
        yield 0.0
        return
    folder = lock_folder(cache_dir)
    start = time.monotonic()
    deadline = start + timeout
    order = list(range(slots))
    random.shuffle(order)  # waiting holders spread over the files instead of all polling the first one
    pause = 0.001
    while True:
        for index in order:
            handle = open(lock_file(folder, f"memory-{key}-{index}.lock"), "rb")
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            held.add(key)
            try:
                yield time.monotonic() - start
            finally:
                held.discard(key)
                handle.close()  # closing the file releases its lock
            return
        if time.monotonic() >= deadline:
            raise TimingSlotTimeout(f"none of the {slots} memory slots of {key} was free in time")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
