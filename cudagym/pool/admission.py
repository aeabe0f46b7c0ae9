"""Admission of evaluators by device memory: a new evaluator starts only where the device has room for it.

Each evaluator of a cuda pool keeps a reference process (the task's model, its input sets, the baselines' and the
stages' temporaries while they run) and candidates, each with a CUDA context of its own. A fixed count of evaluators
cannot know what one of them takes: a task's tensors of a gigabyte make a reference process's stage peak tens of
times that. So before the pool starts an evaluator for a task key it compares

    the device's free memory, less what the evaluators it keeps may still take (each one's footprint beyond what
    it holds now), plus what the evaluators being closed hold (it comes back)

with the new one's footprint and a margin (:meth:`MemoryAdmission.fits`). An evaluator's **footprint** is measured,
per task key:

* its reference process's peak reservation (``torch.cuda.max_memory_reserved``, the ``memory`` command, asked after
  each of its jobs) plus an allowance for its candidates (their CUDA contexts and a share of the reference's peak for
  their own data), and
* what nvidia-smi saw its processes use together (``--query-compute-apps``, read every few seconds),

whichever is larger, the largest ever seen for the key; until one of its jobs has ended, at least one memory slot of
the device (``memory_slots.GIB_PER_SLOT``: what nvidia-smi sees an evaluator use while it loads says nothing of the
peak its first stage will reach), or a third of the device where that is more, so that no more than two evaluators
of unknown size start their first jobs side by side. The device's free memory and each process's use come from
nvidia-smi (``cudagym.device_memory``), read by the pool's dispatcher outside its lock (no CUDA context in the pool's
process). An evaluator whose processes nvidia-smi does not list (another PID namespace) counts at its full footprint.

When a new evaluator does not fit, the set closes idle evaluators, least recently used first, until it does (only
for a task key that has no evaluator: a second one of a key never costs another key its evaluator); else the job
waits in the queue for a lease (an evaluator of its key freed, or memory freed by one closed) until its deadline,
when it is answered with a harness error. A job whose reference process ran out of device memory all the same (a
peak no reading caught) grows its key's footprint (:meth:`MemoryAdmission.ran_out`) and goes back to the queue, up
to ``pool.RETRIES`` times before its deadline, rather than failing. A footprint is only known once
measured, and a later stage may peak higher than the first: so a task key gets a second evaluator only once its
first was measured, and a job starts on a kept evaluator only while every evaluator whose job runs, this one
included, may reach its footprint beside what the idle ones hold (:meth:`MemoryAdmission.job_fits`; else it waits
for a running job to give memory back). Without a reading (nvidia-smi missing or failing) the count bound alone
holds. Not thread-safe: the evaluator set calls it under the pool's lock.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable

from cudagym.device_memory import GIB, PROCESS_BYTES, DeviceReading, MemoryProbe, candidate_allowance
from cudagym.memory_slots import GIB_PER_SLOT
from cudagym.pool.jobs import TaskKey

logger = logging.getLogger(__name__)

DEFAULT_FOOTPRINT_BYTES = GIB_PER_SLOT * GIB  # a task key's footprint before any of its evaluators was measured
UNKNOWN_SHARE = 3  # ... or this fraction of the device, where that is more (``MemoryAdmission.unknown_bytes``)
MARGIN_BYTES = 2 * GIB  # left free beyond a new evaluator's footprint
OUT_OF_MEMORY_GROWTH = 1.5  # a task key's footprint grows by this much each time one of its jobs ran out of memory
READ_EVERY_S = 2.0  # how often the device is read while the pool keeps evaluators or a job waits for one
STALE_S = 10.0  # a reading older than this decides nothing


@dataclasses.dataclass(frozen=True)
class Member:
    """An evaluator of the set as admission sees it: its task key and its processes (none while it is built)."""

    key: TaskKey
    pids: tuple[int, ...] = ()


class MemoryAdmission:
    """Whether a new evaluator fits the device (see the module docstring)."""

    def __init__(self, probe: MemoryProbe, *, default_bytes: int = DEFAULT_FOOTPRINT_BYTES) -> None:
        self.probe = probe
        self.default_bytes = default_bytes
        self.reading: DeviceReading | None = None
        self.measured: dict[TaskKey, int] = {}  # the largest footprint seen per task key
        self.served: set[TaskKey] = set()  # task keys an evaluator of which has finished a job (and said its peak)
        self.returning: set[int] = set()  # processes of evaluators being closed: their memory comes back
        self.wanted = False  # a job waits for a reading
        self.blind = False  # the last read failed: the count bound alone holds until one succeeds
        self._waiting: set[TaskKey] = set()  # keys told to wait since they last fitted (logged once per wait)

    # -- measurements ------------------------------------------------------------------------------

    def due(self, now: float, members: int) -> bool:
        """Whether the dispatcher should read the device now (``members``: the evaluators the set keeps)."""
        old = self.reading is None or now - self.reading.taken >= READ_EVERY_S
        return old and (self.wanted or members > 0)

    def observe(self, reading: DeviceReading | None, members: Iterable[Member]) -> None:
        """Takes a new reading; records what each evaluator's processes use together as a measurement of its key."""
        self.wanted = False
        if reading is None:
            if not self.blind:
                logger.warning("the device's memory cannot be read: evaluators are bounded by their count alone")
            self.blind = True
            return
        self.blind = False
        self.reading = reading
        self.returning &= set(reading.used_by_pid)  # gone from the device: their memory is free now
        for member in members:
            if member.pids and reading.used(member.pids):
                self._measure(member.key, reading.used(member.pids), "its processes on the device")

    def record_peak(self, key: TaskKey, reference_peak: int | None) -> None:
        """Records an evaluator's reference process's peak reservation after a job (None: it could not say)."""
        self.served.add(key)
        if reference_peak:
            footprint = PROCESS_BYTES + reference_peak + candidate_allowance(reference_peak)
            self._measure(key, footprint, "its reference process's peak")

    def _measure(self, key: TaskKey, nbytes: int, what: str) -> None:
        if nbytes > self.measured.get(key, 0):
            logger.info("an evaluator of %s takes %.1f GiB (%s)", key[1], nbytes / GIB, what)
            self.measured[key] = nbytes

    def ran_out(self, key: TaskKey) -> None:
        """A job of ``key`` ran its reference process out of device memory: what was measured fell short (a stage's
        peak between two readings, stages of one process overlapping, a candidate's data beyond its allowance), so
        the key's footprint grows by ``OUT_OF_MEMORY_GROWTH`` and counts as measured."""
        grown = int(self.footprint(key) * OUT_OF_MEMORY_GROWTH)
        logger.warning(
            "a job of %s ran out of device memory: its evaluators now count at %.1f GiB", key[1], grown / GIB
        )
        self.measured[key] = grown
        self.served.add(key)

    def footprint(self, key: TaskKey) -> int:
        """The device memory an evaluator of ``key`` takes at most: measured once one of its jobs ended; before that,
        the default or more where a reading saw more (a reading taken while it loads is a floor, not its peak)."""
        measured = self.measured.get(key)
        if key not in self.served:
            return max(measured or 0, self.unknown_bytes())
        return measured if measured is not None else self.default_bytes  # served, but nothing could be measured

    def unknown_bytes(self) -> int:
        """What an evaluator counts at until one of its key's jobs has ended: the default, or ``1 / UNKNOWN_SHARE`` of
        the device where that is more. Two tasks of unknown size may start side by side; a third waits until one of
        them is measured (on an 80 GB card three evaluators of 1 GiB tensors, each near 29 GiB, were let in at the
        default together and ran it out of memory)."""
        total = self.reading.total_bytes if self.reading is not None else 0
        return max(self.default_bytes, total // UNKNOWN_SHARE)

    def closing(self, pids: Iterable[int]) -> None:
        """The processes of an evaluator being closed: what they hold counts as coming back."""
        self.returning.update(pids)

    # -- the decision ------------------------------------------------------------------------------

    def headroom(self, members: Iterable[Member], returning: Iterable[int] = ()) -> int | None:
        """The device memory a new evaluator may take (see the module docstring) beside ``members``, were the
        processes ``returning`` also closed; None without a fresh reading."""
        reading = self.reading
        if reading is None or time.monotonic() - reading.taken > STALE_S:
            self.wanted = True
            return None
        room = reading.free_bytes + reading.used(self.returning | set(returning))
        for member in members:
            room -= max(0, self.footprint(member.key) - reading.used(member.pids))
        return room

    def fits(
        self, key: TaskKey, members: list[Member], *, returning: Iterable[int] = (), log: bool = True
    ) -> bool | None:
        """Whether a new evaluator of ``key`` fits beside ``members`` (were ``returning`` closed too); None without a
        fresh reading, True while the device cannot be read. ``log``: says so when it does not (once until it fits
        again)."""
        room = self.headroom(members, returning)
        if room is None:
            return True if self.blind else None
        assert self.reading is not None
        # a footprint near the device's whole memory still starts where the device is (nearly) free
        need = min(self.footprint(key) + MARGIN_BYTES, self.reading.total_bytes * 9 // 10)
        if room >= need:
            if key in self._waiting:
                self._waiting.discard(key)
                logger.info("an evaluator of %s fits now (%.1f GiB free for it)", key[1], room / GIB)
            return True
        if log and key not in self._waiting:
            self._waiting.add(key)
            # the room is negative where the evaluators' own footprints already claim more than the device has free
            logger.info(
                "an evaluator of %s needs %.1f GiB of device memory, %.1f GiB are free for it beside %d evaluators",
                key[1],
                need / GIB,
                max(0.0, room / GIB),
                len(members),
            )
        return False

    def job_fits(self, member: Member, leased: list[Member], *, returning: Iterable[int] = ()) -> bool | None:
        """Whether a job may start on the kept evaluator ``member`` beside the ``leased`` ones (whose jobs run), were
        the processes ``returning`` closed too: each of them may reach its footprint while its job runs, the idle ones
        only hold what they hold now (the device's reading already counts it). None without a fresh reading, True
        while the device cannot be read. What was measured after an evaluator was admitted can exceed what it was
        admitted with (a footprint guessed, or a later stage's peak): this keeps the jobs that run within the device
        all the same."""
        room = self.headroom([member, *leased], returning)
        if room is None:
            return True if self.blind else None
        assert self.reading is not None
        nothing_more = room >= self.reading.free_bytes  # every one of them already holds its footprint
        return nothing_more or room >= MARGIN_BYTES

    def measured_key(self, key: TaskKey) -> bool:
        """Whether an evaluator of ``key`` has finished a job (else its footprint is the default's guess, or what a
        reading saw before any of its stages peaked)."""
        return key in self.served

    def waiting(self, key: TaskKey) -> bool:
        """Whether the last decision for ``key`` was to wait for memory."""
        return key in self._waiting
