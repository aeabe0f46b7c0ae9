"""The machine pool's evaluators: one set of expensive processes per task, leased to one job at a time.

An evaluator (:class:`~cudagym.evaluator.LocalEvaluator`) owns a trusted reference process with its task loaded and
its baselines known, a fork server and spare candidates. The pool keeps them by :func:`~cudagym.pool.jobs.task_key`
(the task's content and the settings) and lends one to a job at a time, so every session on a task uses the same
processes. :meth:`EvaluatorSet.lease` answers a job with:

* an idle evaluator of its key (the most recently used), else
* a new one, when its key has fewer than ``max_per_task`` (a second one only while jobs of the key wait: the job asking
  is one) and the set fewer than ``max_evaluators``; at the bound, for a key that has no evaluator, the least
  recently used idle evaluator of another key is closed to make room (a key that has one waits for it: closing
  another key's would trade one queue for another's reference and baselines, and evaluators would churn); on cuda it
  must also fit the device's memory (:mod:`cudagym.pool.admission`), and idle evaluators are closed, least recently
  used first, until it does. An idle evaluator whose key has jobs queued is closed for another key only once it has
  served its turn (:func:`served_its_turn`: a few times what its first job, the one that built it, took): with more
  tasks queued than the device holds, evaluators then take turns instead of closing each other after every job;
  else
* nothing: the job waits in the queue (also while its key's first evaluator is being built ahead, or while the
  memory of evaluators being closed comes back).

Evaluators idle for ``idle_seconds`` are closed, and so are the least recently used idle ones while the set's
processes hold more than ``memory_bytes`` (proportional set size, so pages shared by forked candidates count once;
measured by :func:`weigh` outside the pool's lock, acted on by :meth:`EvaluatorSet.shed` under it).
An evaluator whose job raised, ran past its deadline or came back with a harness error is retired (closed, never
lent again); the next job of its key gets a new one.

Not thread-safe on its own: the pool calls it under its lock; evaluators are built and closed outside the lock by the
caller (:class:`Lease` says which).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from cudagym.backends import Backend
from cudagym.eval_config import EvalConfig
from cudagym.evaluator import Evaluator
from cudagym.memory_slots import auto_slots
from cudagym.pool.admission import Member, MemoryAdmission
from cudagym.pool.jobs import TaskKey
from cudagym.tasks.task import Task

logger = logging.getLogger(__name__)


EvaluatorMaker = Callable[[Task, EvalConfig], Evaluator]
"""Builds an evaluator for a task and settings (the pool's backend and cache are bound in)."""

TURN_MIN_S = 5.0
TURN_BUILDS = 4.0


def served_its_turn(lease: Lease, now: float) -> bool:
    """Whether ``lease``'s evaluator has been kept long enough to be closed for another key's job while jobs of its
    own key wait: ``TURN_BUILDS`` times what bringing it up took (its first job, which loaded the reference and timed
    the baselines), and at least ``TURN_MIN_S``, since its first job ended. An evaluator costs that bring-up again
    each time it comes back, so a turn of a few bring-ups keeps the device's time mostly on jobs."""
    if lease.ready_at is None:
        return False
    return now - lease.ready_at >= max(TURN_MIN_S, TURN_BUILDS * lease.bring_up_seconds)


def default_max_evaluators() -> int:
    """One evaluator per core, at least four (a few tasks at once stay warm instead of closing each other) and at most
    16: each holds a reference process and candidates, and the memory bound closes idle ones before that."""
    return max(4, min(16, os.cpu_count() or 4))


def default_memory_bytes() -> int:
    """Half of the machine's memory."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):
        return 16 << 30


@dataclasses.dataclass(frozen=True)
class PoolLimits:
    """How much the pool keeps (see the module docstring).

    Attributes:
        max_evaluators: evaluators at once, leased or idle (each: a reference process, a fork server, candidates).
        max_per_task: evaluators of one task key at once (a second only while jobs of the task wait); by default as
            many as ``max_evaluators``: a busy task may take every free place, and the queue's turns and the eviction
            of idle ones still give another task's job the next one that frees.
        memory_bytes: the idle evaluators are closed, least recently used first, while all of them hold more.
        idle_seconds: an evaluator unused this long is closed.
        compile_workers: builds at once (default: the machine's cores).
    """

    max_evaluators: int = dataclasses.field(default_factory=default_max_evaluators)
    max_per_task: int = 0  # 0: ``max_evaluators``
    memory_bytes: int = dataclasses.field(default_factory=default_memory_bytes)
    idle_seconds: float = 600.0
    compile_workers: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 2)

    @classmethod
    def for_backend(cls, backend: Backend, **given: Any) -> PoolLimits:
        """The bounds for ``backend`` with the defaults where ``given`` says nothing: on cuda at most one evaluator
        per memory slot of the device (``memory_slots.auto_slots``, one per 20 GiB), since each keeps a reference
        process with the task's model and inputs on the device, and a stage's reference and candidate are sized to
        one slot."""
        if backend.is_cuda and given.get("max_evaluators") is None:
            given["max_evaluators"] = max(1, min(default_max_evaluators(), auto_slots(backend)))
        return cls(**{name: value for name, value in given.items() if value is not None})

    def __post_init__(self) -> None:
        if self.max_per_task == 0:
            object.__setattr__(self, "max_per_task", self.max_evaluators)
        for name in ("max_evaluators", "max_per_task", "compile_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.memory_bytes <= 0 or self.idle_seconds <= 0:
            raise ValueError("memory_bytes and idle_seconds must be positive")


_SLOT_IDS = itertools.count(1)


@dataclasses.dataclass(eq=False)
class Lease:
    """One evaluator slot of the set: lent to a job, or idle.

    ``evaluator`` is None until the job's runner builds it (outside the pool's lock): a new slot reserves the place.
    """

    key: TaskKey
    evaluator: Evaluator | None = None
    preparing: bool = False  # lent to the pool's ``prepare``: it is being built, jobs of its key wait for it
    slot: int = dataclasses.field(default_factory=lambda: next(_SLOT_IDS))
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    jobs: int = 0
    born: float = dataclasses.field(default_factory=time.monotonic)
    ready_at: float | None = None  # when its first job ended (the evaluator is up)

    @property
    def bring_up_seconds(self) -> float:
        """From the slot's reservation to the end of its first job (0 before that job ends)."""
        return 0.0 if self.ready_at is None else self.ready_at - self.born


@dataclasses.dataclass(frozen=True)
class SetStats:
    """A look at the evaluators: how many, of how many task keys, and what happened to them."""

    leased: int
    idle: int
    keys: int
    created: int
    evicted: int
    retired: int
    resident_bytes: int


class EvaluatorSet:
    """Evaluators by task key, leased one job at a time (see the module docstring)."""

    def __init__(self, make: EvaluatorMaker, limits: PoolLimits, admission: MemoryAdmission | None = None) -> None:
        self.make = make
        self.limits = limits
        self.admission = admission  # new evaluators by device memory (cuda); None: by count alone
        self._idle: collections.OrderedDict[int, Lease] = collections.OrderedDict()  # least recently used first
        self._leased: dict[int, Lease] = {}
        self.created = self.evicted = self.retired = 0
        self.resident_bytes = 0  # what the evaluators held when last weighed (before ``shed`` closed any)

    def __len__(self) -> int:
        return len(self._idle) + len(self._leased)

    def count(self, key: TaskKey) -> int:
        return sum(lease.key == key for lease in (*self._idle.values(), *self._leased.values()))

    def lease(
        self, key: TaskKey, *, evict: bool = True, queued: Collection[TaskKey] = ()
    ) -> tuple[Lease | None, list[Evaluator]]:
        """An evaluator slot for a job of ``key`` (None: it must wait) and the evaluators closed to make room (the
        caller closes them outside its lock; ``evict``: idle ones may be closed for device memory; ``queued``: the
        keys with jobs waiting, whose idle evaluators are closed only once they have served their turn)."""
        for slot, lease in reversed(self._idle.items()):
            if lease.key == key:
                return self._lend_idle(slot, lease), []
        if self.count(key) >= self.limits.max_per_task or any(
            lease.preparing and lease.key == key for lease in self._leased.values()
        ):
            return None, []  # the job waits (for an evaluator of its key being built: it is one job away)
        if self.admission is not None and self.count(key) and not self.admission.measured_key(key):
            return None, []  # a second evaluator of a key waits until the first one's footprint is known
        closed: list[Evaluator] = []
        closable = self._closable(queued)
        if len(self) >= self.limits.max_evaluators:
            if not closable or self.count(key):
                return None, []  # at the bound, a key that has an evaluator waits for it rather than close another's
            closed += self._evict(closable.pop(0), f"to make room for {key[1]}")
        if self.admission is not None:
            fits = self.admission.fits(key, self.census())
            # idle evaluators of other keys are closed only for a key that has none: one more evaluator of a key that
            # has one would only shorten its queue, at the price of another key's reference and baselines (thrash)
            if fits is False and evict and closable and not self.count(key) and self._fits_without(key, closable):
                while fits is False and closable:
                    closed += self._evict(closable.pop(0), f"its device memory for {key[1]}")
                    fits = self.admission.fits(key, self.census(), log=False)
            if not fits:
                return None, closed  # the job waits: for a reading, or for memory coming back
        self.created += 1
        return self._lend(Lease(key)), closed

    def _lend_idle(self, slot: int, lease: Lease) -> Lease | None:
        """The idle evaluator ``lease`` for a job when the device has room for its job beside those running
        (``MemoryAdmission.job_fits``), or when no job runs (then nothing else can give memory back: the idle ones
        hold what they hold and its own stage is all that grows); else None, and the job waits for running jobs to
        give their memory back. No evaluator is closed for it: a reading taken during a job that has ended since
        would close one for memory already free."""
        if self.admission is not None and self._leased:
            leased = [_member(other) for other in self._leased.values()]
            if not self.admission.job_fits(_member(lease), leased):
                return None
        del self._idle[slot]
        return self._lend(lease)

    def _closable(self, queued: Collection[TaskKey]) -> list[int]:
        """The idle slots that may be closed for another key's job, least recently used first: those of keys with no
        job waiting, and those that have served their turn."""
        now = time.monotonic()
        wanted = set(queued)
        return [slot for slot, lease in self._idle.items() if lease.key not in wanted or served_its_turn(lease, now)]

    def _evict(self, slot: int, why: str) -> list[Evaluator]:
        """Closes the idle evaluator of ``slot`` (``why``: for the log); returns it for the caller to close."""
        victim = self._idle.pop(slot)
        self.evicted += 1
        logger.info("closing the idle evaluator of %s: %s", victim.key[1], why)
        return self._closing([victim])

    def _closing(self, leases: list[Lease]) -> list[Evaluator]:
        """The evaluators of ``leases``, which leave the set to be closed (their device memory then counts as coming
        back)."""
        evaluators = [lease.evaluator for lease in leases if lease.evaluator is not None]
        if self.admission is not None:
            for evaluator in evaluators:
                self.admission.closing(_pids(evaluator))
        return evaluators

    def _fits_without(self, key: TaskKey, closable: list[int]) -> bool:
        """Whether a new evaluator of ``key`` would fit were the idle evaluators of ``closable`` closed (else none is
        closed for it: the others hold what it lacks)."""
        assert self.admission is not None
        kept = [_member(lease) for lease in self._leased.values()]
        kept += [_member(lease) for slot, lease in self._idle.items() if slot not in closable]
        closing = [self._idle[slot].evaluator for slot in closable]
        returning = [pid for evaluator in closing if evaluator is not None for pid in _pids(evaluator)]
        return bool(self.admission.fits(key, kept, returning=returning, log=False))

    def census(self) -> list[Member]:
        """Every evaluator, idle, leased or being built, with its task key and processes (for admission)."""
        return [_member(lease) for lease in (*self._idle.values(), *self._leased.values())]

    def _lend(self, lease: Lease) -> Lease:
        lease.jobs += 1
        self._leased[lease.slot] = lease
        return lease

    def build(self, lease: Lease, task: Task, config: EvalConfig) -> Evaluator:
        """The lease's evaluator, built for ``task`` and ``config`` on first use (outside the pool's lock: only the
        lease's holder touches it)."""
        if lease.evaluator is None:
            logger.info("a new evaluator for %s (slot %d)", task.id, lease.slot)
            lease.evaluator = self.make(task, config)
        return lease.evaluator

    def release(self, lease: Lease, *, healthy: bool) -> list[Evaluator]:
        """Takes the lease back: kept idle when ``healthy``, else retired. Returns the evaluators to close."""
        self._leased.pop(lease.slot, None)
        lease.last_used = time.monotonic()
        if lease.ready_at is None and lease.evaluator is not None:
            lease.ready_at = lease.last_used
        if healthy and lease.evaluator is not None:
            self._idle[lease.slot] = lease
            return []
        if lease.evaluator is not None:
            self.retired += 1
            logger.warning("retiring the evaluator of %s (slot %d)", lease.key[1], lease.slot)
        return self._closing([lease])

    def expire(self, now: float | None = None) -> list[Evaluator]:
        """The idle evaluators unused for ``idle_seconds``, removed from the set for the caller to close."""
        now = time.monotonic() if now is None else now
        stale = [slot for slot, lease in self._idle.items() if now - lease.last_used > self.limits.idle_seconds]
        self.evicted += len(stale)
        return self._closing([self._idle.pop(slot) for slot in stale])

    def members(self) -> list[tuple[int, Evaluator]]:
        """(slot, evaluator) of every built evaluator, idle or leased: what :func:`weigh` measures."""
        every = (*self._idle.values(), *self._leased.values())
        return [(lease.slot, lease.evaluator) for lease in every if lease.evaluator is not None]

    def shed(self, weights: dict[int, int]) -> list[Evaluator]:
        """Given each slot's bytes (:func:`weigh`, measured outside the caller's lock), the least recently used idle
        evaluators while all of them hold more than ``memory_bytes``; removed from the set for the caller to close."""
        self.resident_bytes = held = sum(weights.values())
        closed: list[Evaluator] = []
        while self._idle and held > self.limits.memory_bytes:
            slot, lease = self._idle.popitem(last=False)
            held -= weights.get(slot, 0)
            self.evicted += 1
            closed += self._closing([lease])
            logger.info("closing the idle evaluator of %s: the pool's evaluators hold too much memory", lease.key[1])
        return closed

    def drain(self) -> list[Evaluator]:
        """Every evaluator, idle or leased, removed for the caller to close (the pool is shutting down)."""
        every = [*self._idle.values(), *self._leased.values()]
        self._idle.clear()
        self._leased.clear()
        return [lease.evaluator for lease in every if lease.evaluator is not None]

    def stats(self) -> SetStats:
        keys = {lease.key for lease in (*self._idle.values(), *self._leased.values())}
        return SetStats(
            len(self._leased), len(self._idle), len(keys), self.created, self.evicted, self.retired, self.resident_bytes
        )


def weigh(members: list[tuple[int, Evaluator]]) -> dict[int, int]:
    """Each slot's evaluator's processes' bytes (:func:`proportional_bytes`): an evaluator that says which processes
    it keeps (``process_ids()``, as ``LocalEvaluator`` does) is weighed by them, another one is weightless."""
    return {slot: sum(map(proportional_bytes, _pids(evaluator))) for slot, evaluator in members}


def _member(lease: Lease) -> Member:
    """``lease``'s evaluator as admission sees it (no processes while it is built)."""
    return Member(lease.key, tuple(_pids(lease.evaluator)) if lease.evaluator is not None else ())


def _pids(evaluator: Evaluator) -> list[int]:
    ids = getattr(evaluator, "process_ids", None)
    try:
        return list(ids()) if callable(ids) else []
    except (OSError, RuntimeError, AttributeError):  # a process ending meanwhile
        return []


def proportional_bytes(pid: int) -> int:
    """The proportional set size of ``pid`` (its resident pages, shared ones divided among their sharers); its
    resident set where the kernel gives no rollup; 0 for a process that is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
