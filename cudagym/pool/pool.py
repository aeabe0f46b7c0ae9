"""``EvaluationPool``: one machine's evaluation work for every environment on it, done by one set of processes.

Environments (through :class:`~cudagym.pool.client.PoolEvaluator`, in this process or behind ``cudagym pool``'s
socket) submit :class:`~cudagym.pool.jobs.PoolJob` s; the pool answers each with its stage result. It owns the
expensive parts once:

* evaluators, shared by every session on the same task and leased to one job at a time
  (:mod:`cudagym.pool.evaluators`: bounded in count and memory, idle ones closed);
* compile workers sized to the cores, sharing the build cache (:mod:`cudagym.pool.compile_lane`).

A dispatcher thread takes queued jobs in fair order (round robin over sessions, :class:`~cudagym.pool.fair_queue.
FairQueue`): the next session's first job that can start now (a compile worker free, or an evaluator of its task
idle or allowed to be made), so a session that queues many jobs does not hold back another's single verify, and a
job waiting for a busy task does not hold back jobs of other tasks. Jobs run on threads of their own; timed runs of
all of them still take turns on the device's timing slot (:mod:`cudagym.gpu_lock`), as they do between processes.

Failures are results, never exceptions: a job still queued or running at its deadline (its env's stage bounds,
counted from submission) is answered with a ``harness_error`` result, and so is one whose evaluator raised. An
evaluator that raised, ran past a deadline or answered with a harness error (its reference process killed, say) is
retired and closed, so the next job of its task gets a new one. Two harness errors are the machine's own and go back
to the queue instead, up to ``RETRIES`` times before the job's deadline (:class:`Retry`): a reference process that ran
out of device memory (a peak the memory admission did not foresee: its task's footprint grows,
:meth:`~cudagym.pool.admission.MemoryAdmission.ran_out`, and its evaluator is retired), and a profile whose trusted
clock calibrated beside other work on the device (evaluators starting or closing; its evaluator is kept). A candidate
that runs the device out of memory to fail its reference gains a few retries and a larger footprint for its task,
nothing more; no retry can turn a failure of the candidate's into a pass, since every try is judged afresh.

Trust is as in a local evaluator: the pool's process builds and compares through the evaluators' trusted reference
processes, which run no agent code; candidates run in their sandboxed single-use processes, and no figure that decides
a reward comes from a process that ran agent code. Sharing an evaluator between sessions is sound because everything
it keeps between stages is keyed by content or by the workspace's path (the failure memo, the build cache, the
imported single-file hashes) or is the task's own (the reference, its baselines, the input verdict), and what one call
records for ``submit`` (the fixed files found changed, the static findings) is set afresh by each compile of the same
lease (``tests/pool/test_sharing.py`` holds the two-session case).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from cudagym.backends import Backend
from cudagym.build import default_cache_dir
from cudagym.device_memory import DeviceReading, MemoryProbe, nvidia_smi_probe
from cudagym.eval_config import EvalConfig
from cudagym.evaluator import Evaluator, LocalEvaluator
from cudagym.fault_text import says_out_of_memory
from cudagym.pool.admission import MemoryAdmission
from cudagym.pool.compile_lane import CompileLane
from cudagym.pool.evaluators import EvaluatorMaker, EvaluatorSet, Lease, PoolLimits, SetStats, weigh
from cudagym.pool.fair_queue import FairQueue
from cudagym.pool.jobs import PoolJob, TaskKey, run_stage, task_key
from cudagym.results import StageResult, Status
from cudagym.stage_judgement import miscalibrated
from cudagym.tasks.task import Task

logger = logging.getLogger(__name__)
TICK_S = 0.25  # the dispatcher's longest sleep: deadlines and idle evaluators are looked at this often
EXPIRE_EVERY_S = 2.0  # how often idle evaluators are expired and weighed (their processes' memory read from /proc)
RETRIES = 3  # times a job goes back to the queue after a failure of the machine's own (``Retry``)


class Retry(enum.Enum):
    """Why a job answered with a harness error goes back to the queue instead: a failure of the machine's own that
    another try may not meet."""

    OUT_OF_MEMORY = "its reference process ran out of device memory"  # its evaluator is retired
    CLOCK_DISTURBED = "the trusted clock calibrated beside other work on the device"  # its evaluator is kept


@dataclasses.dataclass(eq=False)
class _Entry:
    """A job as the pool tracks it, from submit to answer."""

    job: PoolJob
    future: Future[StageResult]
    lease: Lease | None = None  # its evaluator, from dispatch to answer (None: the compile lane, or not started)
    started: float | None = None
    answered: bool = False
    retries: int = 0  # times it went back to the queue (``Retry``)


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """A look at the pool: jobs queued, running and answered, and its evaluators."""

    queued: int
    running: int
    compiling: int
    done: int
    failed: int
    expired: int
    sessions_waiting: int
    evaluators: SetStats


class EvaluationPool:
    """The machine's evaluation pool (see the module docstring).

    Args:
        backend: the backend every job runs on.
        cache_dir: the build and baseline cache (default: the usual cache directory).
        limits: how many evaluators and compile workers, how much memory, how long an idle evaluator stays.
        make_evaluator: builds an evaluator for a task and settings (default: a ``LocalEvaluator`` on ``backend``
            and ``cache_dir``); tests give one of their own.
        memory_probe: reads the device's memory for the admission of evaluators (:mod:`cudagym.pool.admission`);
            default: nvidia-smi on cuda, none on cpu (the count and host memory bounds alone); tests give one.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        cache_dir: str | Path | None = None,
        limits: PoolLimits | None = None,
        make_evaluator: EvaluatorMaker | None = None,
        memory_probe: MemoryProbe | None = None,
    ) -> None:
        self.backend = backend
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.limits = limits or PoolLimits.for_backend(backend)
        probe = memory_probe or (nvidia_smi_probe(backend) if backend.is_cuda else None)
        self.admission = MemoryAdmission(probe) if probe is not None else None
        self.evaluators = EvaluatorSet(make_evaluator or self._local_evaluator, self.limits, self.admission)
        self.lane = CompileLane(backend, self.cache_dir)
        self._queue: FairQueue[_Entry] = FairQueue(lambda entry: entry.job.session)
        self._running: set[_Entry] = set()
        self._compiling = 0
        self._done = self._failed = self._expired = 0
        self._cond = threading.Condition()
        self._closed = False
        self._last_expire = time.monotonic()
        workers = self.limits.max_evaluators + self.limits.compile_workers
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cudagym-pool")
        self._dispatcher = threading.Thread(target=self._loop, name="cudagym-pool-dispatch", daemon=True)
        self._dispatcher.start()

    def _local_evaluator(self, task: Task, config: EvalConfig) -> Evaluator:
        return LocalEvaluator(task, self.backend, config, cache_dir=self.cache_dir)

    # -- the public side ---------------------------------------------------------------------------

    def submit(self, job: PoolJob) -> Future[StageResult]:
        """Queues ``job``; the future's result is its stage result (a harness error where the pool failed)."""
        future: Future[StageResult] = Future()
        if job.backend != self.backend.name:
            future.set_result(job.failure(f"the pool runs the {self.backend.name} backend, not {job.backend}"))
            return future
        with self._cond:
            if self._closed:
                future.set_result(job.failure("the pool is shut down"))
                return future
            self._queue.put(_Entry(job, future))
            self._cond.notify_all()
        return future

    def submit_many(self, jobs: Iterable[PoolJob]) -> list[Future[StageResult]]:
        """Queues a batch; their futures, in the batch's order."""
        return [self.submit(job) for job in jobs]

    def run(self, job: PoolJob) -> StageResult:
        """Submits ``job`` and waits for its result (answered by its deadline at the latest)."""
        return self.submit(job).result()

    def prepare(self, task: Task, config: EvalConfig) -> None:
        """Starts an evaluator for ``task`` ahead of its first job (it loads the reference and times the baselines
        in the background) where the task has none and the pool has room; does nothing otherwise."""
        key = task_key(task, self.backend.name, config)
        with self._cond:
            if self._closed or self.evaluators.count(key) or len(self.evaluators) >= self.limits.max_evaluators:
                return
            lease, _ = self.evaluators.lease(key, evict=False)  # below the count bound: it closes none
            if lease is not None:
                lease.preparing = True
        if lease is not None:  # else the device's memory has no room now: the task's first job waits for it
            self._threads.submit(self._prepare, lease, task, config)

    def stats(self) -> PoolStats:
        with self._cond:
            return PoolStats(
                queued=len(self._queue),
                running=len(self._running),
                compiling=self._compiling,
                done=self._done,
                failed=self._failed,
                expired=self._expired,
                sessions_waiting=len(self._queue.clients()),
                evaluators=self.evaluators.stats(),
            )

    def close(self) -> None:
        """Answers queued and running jobs with harness errors and closes every evaluator (idempotent)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            for entry in [*self._queue.items(), *self._running]:
                self._answer(entry, entry.job.failure("the pool was shut down before the job finished"))
            self._cond.notify_all()
            closing = self.evaluators.drain()
        self._dispatcher.join(timeout=10)
        _close_all(closing)
        self._threads.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> EvaluationPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the dispatcher ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            closing: list[Evaluator] = []
            members: list[tuple[int, Evaluator]] = []
            admission = self.admission
            # the device is read outside the lock (nvidia-smi takes a while): when a job waits for a reading, and
            # every few seconds while the pool keeps evaluators (what their processes use measures their task keys)
            read = admission is not None and admission.due(time.monotonic(), len(self.evaluators))
            reading = _read_device(admission) if admission is not None and read else None
            with self._cond:
                if self._closed:
                    return
                if admission is not None and read:
                    admission.observe(reading, self.evaluators.census())
                try:
                    closing += self._round()
                except Exception:  # the dispatcher must go on: one bad round must not strand every queued job
                    logger.exception("the evaluation pool's dispatcher failed a round")
                self._cond.wait(timeout=TICK_S)
                now = time.monotonic()
                weighing = now - self._last_expire > EXPIRE_EVERY_S
                if weighing:
                    self._last_expire = now
                    closing += self.evaluators.expire(now)
                    members = self.evaluators.members()
            if weighing:  # /proc is read outside the lock: submits and answers go on meanwhile
                weights = weigh(members)
                with self._cond:
                    closing += self.evaluators.shed(weights)
            if closing:  # evaluators closed outside the lock, on a thread of their own (a close may take seconds)
                threading.Thread(target=_close_all, args=(closing,), name="cudagym-pool-close", daemon=True).start()

    def _round(self) -> list[Evaluator]:
        """One look at the queue and the running jobs (under the lock); returns the evaluators to close."""
        now = time.monotonic()
        closing = self._past_deadline(now)
        queued = {entry.job.key for entry in self._queue.items() if not self.lane.takes(entry.job)}
        while (entry := self._queue.take(lambda e, out=closing: self._reserve(e, out, queued))) is not None:
            if not entry.retries and not entry.future.set_running_or_notify_cancel():  # cancelled while queued
                closing += self._settle(entry, healthy=True)
                continue
            entry.started = now
            self._running.add(entry)
            self._threads.submit(self._execute, entry)
        return closing

    def _reserve(self, entry: _Entry, closing: list[Evaluator], queued: set[TaskKey]) -> bool:
        """Whether ``entry`` can start now; reserves what it will run on (a compile worker or an evaluator lease).
        ``queued``: the task keys with evaluator jobs waiting (their idle evaluators are closed for another key's job
        only once they have served their turn)."""
        if self.lane.takes(entry.job):
            if self._compiling >= self.limits.compile_workers:
                return False
            self._compiling += 1
            return True
        lease, evicted = self.evaluators.lease(entry.job.key, queued=queued)
        closing += evicted
        entry.lease = lease
        return lease is not None

    def _past_deadline(self, now: float) -> list[Evaluator]:
        """Answers the jobs at their deadline with harness errors: a queued one leaves the queue; a running one's
        evaluator is retired (closed now, which ends its stuck stage; its thread's answer is dropped)."""
        closing: list[Evaluator] = []
        for entry in self._queue.items():
            if now >= entry.job.deadline:
                self._queue.remove(entry)
                self._expired += 1
                reason = "the job waited in the queue past its deadline"
                if self.admission is not None and self.admission.waiting(entry.job.key):
                    reason += " (a new evaluator of its task did not fit in the device's free memory)"
                self._answer(entry, entry.job.failure(reason))
        for entry in [e for e in self._running if now >= e.job.deadline and not e.answered]:
            self._expired += 1
            waited = (entry.started or now) - entry.job.submitted
            reason = f"the job ran past its deadline (it waited {waited:.1f} s to start); its evaluator is replaced"
            self._answer(entry, entry.job.failure(reason))
            if entry.lease is not None and entry.lease.evaluator is not None:
                closing.append(entry.lease.evaluator)  # the lease is retired when its thread returns
        return closing

    # -- the jobs' threads -------------------------------------------------------------------------

    def _execute(self, entry: _Entry) -> None:
        """Runs one dispatched job and answers it (a harness error where the evaluator raised)."""
        job = entry.job
        peak: int | None = None
        try:
            if entry.lease is None:
                result: StageResult = self.lane.run(job)
            else:
                evaluator = self.evaluators.build(entry.lease, job.task, job.config)
                result = run_stage(evaluator, job.stage, job.workspace, ncu=job.ncu)
                peak = device_peak(evaluator) if self.admission is not None else None
            healthy = result.status is not Status.HARNESS_ERROR
        except Exception as exc:  # the evaluator returns results; this is the machinery failing
            logger.exception("the pool failed %s", job.describe())
            result, healthy = job.failure(f"{type(exc).__name__}: {exc}"), False
        with self._cond:
            if self.admission is not None and entry.lease is not None:
                self.admission.record_peak(job.key, peak)
            again = self._retry(entry, result)
            healthy = healthy or again is Retry.CLOCK_DISTURBED
            closing = self._settle(entry, healthy=healthy and not entry.answered and not self._closed)
            if again is not None:
                entry.retries += 1
                self._queue.put(entry)
            else:
                self._answer(entry, result)
            self._cond.notify_all()
        _close_all(closing)

    def _retry(self, entry: _Entry, result: StageResult) -> Retry | None:
        """Why ``entry`` goes back to the queue (under the lock), or None: its harness error is a failure of the
        machine's own (``Retry``) and it has retries and time left. Running out of device memory, which admission did
        not foresee, also grows its task's footprint (``MemoryAdmission.ran_out``); a candidate's own shortage is its
        result, not a harness error."""
        if entry.lease is None or entry.answered or self._closed or result.status is not Status.HARNESS_ERROR:
            return None
        if self.admission is not None and says_out_of_memory(result.message):
            self.admission.ran_out(entry.job.key)
            why = Retry.OUT_OF_MEMORY
        elif miscalibrated(result):
            why = Retry.CLOCK_DISTURBED
        else:
            return None
        if entry.retries >= RETRIES or time.monotonic() >= entry.job.deadline:
            return None
        logger.info("%s: %s; queued again", entry.job.describe(), why.value)
        return why

    def _settle(self, entry: _Entry, *, healthy: bool) -> list[Evaluator]:
        """Gives back what ``entry`` ran on (under the lock); returns the evaluators to close."""
        self._running.discard(entry)
        if entry.lease is None:
            self._compiling -= 1
            return []
        lease, entry.lease = entry.lease, None
        return self.evaluators.release(lease, healthy=healthy)

    def _prepare(self, lease: Lease, task: Task, config: EvalConfig) -> None:
        healthy = True
        try:
            self.evaluators.build(lease, task, config)
        except Exception:
            logger.exception("starting an evaluator for %s ahead failed (its first job starts one)", task.id)
            healthy = False
        with self._cond:
            lease.preparing = False
            closing = self.evaluators.release(lease, healthy=healthy and not self._closed)
            self._cond.notify_all()
        _close_all(closing)

    def _answer(self, entry: _Entry, result: StageResult) -> None:
        """Answers the job once (under the lock); a later answer (its thread's, after a deadline) is dropped."""
        if entry.answered:
            return
        entry.answered = True
        self._done += 1
        if result.status is Status.HARNESS_ERROR:
            self._failed += 1
            logger.warning("%s: %s", entry.job.describe(), result.message)
        if not entry.future.done():
            entry.future.set_result(result)


def _read_device(admission: MemoryAdmission) -> DeviceReading | None:
    """The admission's probe read now; None where it failed (the dispatcher must go on)."""
    try:
        return admission.probe()
    except Exception:
        logger.exception("reading the device's memory failed")
        return None


def device_peak(evaluator: Evaluator) -> int | None:
    """The most device memory ``evaluator``'s reference process has reserved, where it says
    (``LocalEvaluator.device_peak_bytes``); None where it cannot say now."""
    ask = getattr(evaluator, "device_peak_bytes", None)
    try:
        return ask() if callable(ask) else None
    except (OSError, RuntimeError):  # its reference process ending meanwhile
        return None


def _close_all(evaluators: list[Evaluator]) -> None:
    for evaluator in evaluators:
        try:
            evaluator.close()
        except Exception:  # closing is best effort: its processes die with the pool at the latest
            logger.exception("closing an evaluator failed")
