"""The device memory the synthesis workers share, and who may hold how much of it.

Each worker judges its candidate in a reference process of its own, and the candidate's tensors (its inputs, the
chain's intermediates, the outputs kept for the determinism check, torch.compile's buffers) live there until the
judgement ends. Twelve workers on one GPU can together ask for more than the device has; a candidate that then runs
out of memory did so through the others' tensors, not its own, and dropping it as ``out_of_memory`` would both lose a
sound task and bias the set against the memory-heavy ones.

So a worker holds a share of a :class:`MemoryBudget` for the whole judgement: the candidate's estimated footprint
(``plan.footprint``), granted first come, first served, while what the holders ask for together fits. The estimate is
a first guess; what makes the verdict sound is the repeat: a candidate that still runs out of memory is judged once
more holding the whole budget (:meth:`MemoryBudget.alone`: no other candidate's tensors on the device), and only one
that runs out of memory alone is dropped for it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from cudagym.backends import Backend
from cudagym.device_memory import GIB, PROCESS_BYTES, nvidia_smi_probe

logger = logging.getLogger(__name__)

USABLE_SHARE = 0.92
"""The share of the device's free memory (read when the run starts) the workers' candidates may hold together; the
rest is the caching allocator's slack and what other processes take meanwhile."""


class MemoryBudget:
    """``capacity`` bytes of device memory shared by threads, granted in the order asked (a large request waiting
    at the head of the queue is not overtaken by smaller ones, so it is never starved)."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a memory budget needs a positive capacity, got {capacity}")
        self.capacity = capacity
        self._held = 0
        self._queue: collections.deque[object] = collections.deque()
        self._changed = threading.Condition()

    @property
    def held(self) -> int:
        """The bytes granted now."""
        with self._changed:
            return self._held

    @contextlib.contextmanager
    def hold(self, nbytes: int) -> Iterator[float]:
        """Holds ``nbytes`` (at most the capacity, at least 1) for the block; yields the seconds waited for them."""
        wanted = min(max(int(nbytes), 1), self.capacity)
        ticket = object()
        start = time.monotonic()
        with self._changed:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or self._held + wanted > self.capacity:
                    self._changed.wait()
            finally:
                self._queue.remove(ticket)
                self._changed.notify_all()  # the next in the queue may fit beside this one
            self._held += wanted
        waited = time.monotonic() - start
        try:
            yield waited
        finally:
            with self._changed:
                self._held -= wanted
                self._changed.notify_all()

    def alone(self) -> contextlib.AbstractContextManager[float]:
        """Holds the whole budget: no other holder's tensors on the device for the block."""
        return self.hold(self.capacity)


def device_budget(backend: Backend, workers: int) -> MemoryBudget | None:
    """The budget of ``workers`` workers on ``backend``'s GPU: ``USABLE_SHARE`` of its free memory now, less a CUDA
    context per worker's reference process. None on cpu, for one worker (nothing to share), or where the device
    cannot be read (the workers then run without one, as before)."""
    if not backend.is_cuda or workers < 2:
        return None
    reading = nvidia_smi_probe(backend)()
    if reading is None:
        logger.warning("synth: the device's memory could not be read; the workers share it without a budget")
        return None
    capacity = int(reading.free_bytes * USABLE_SHARE) - workers * PROCESS_BYTES
    if capacity < GIB:
        logger.warning(
            "synth: %.1f GiB free on the device is too little for %d workers' budget; they share it without one",
            reading.free_bytes / GIB,
            workers,
        )
        return None
    logger.info("synth: %d workers share %.1f GiB of device memory", workers, capacity / GIB)
    return MemoryBudget(capacity)
