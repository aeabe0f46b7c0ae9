"""``RayPool``: evaluation jobs from many environments (or a trainer) run on Ray actors across a cluster.

``submit(job)`` queues a job and returns a ``concurrent.futures.Future`` of its stage result; ``submit_many(jobs)``
queues a batch (a trainer's rollouts) and returns their futures in order. The pool's dispatcher (one thread) hands
jobs to free workers of the job's backend, the clients' queues taken in turn (round robin), so one trainer's batch of
hundreds does not hold back an environment's single verify; among free workers it prefers one where the job's task
is already warm. Workers are Ray actors placed by Ray (``cudagym.ray_pool.workers``); the pool sends each of them no
more jobs than its ``concurrency``.

Failures never raise at the caller: a job whose worker or node is lost is run again on another worker once (the lost
worker is replaced), then answered with a ``harness_error`` result; so is a job that runs past its deadline (the
environment's own stage bounds, ``Job.run_deadline_s``), one answered with a harness error by two workers (or twice
by the only one), and one no worker could be placed for within ``placement_timeout_s`` (or whose backend the pool has
no worker for). A harness error is the job's, not its worker's (the worker's hosted pool has retired the evaluator
that failed): a worker is replaced only when it answers ``REPLACE_AFTER_HARNESS_ERRORS`` jobs in a row so, since it
runs many jobs at once and replacing it loses them all.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future

from cudagym.pool.fair_queue import FairQueue
from cudagym.ray_pool.jobs import Job, harness_error
from cudagym.ray_pool.watcher import Finished, Outcome, Running, Watcher
from cudagym.ray_pool.workers import WorkerHandle, WorkerSet, WorkerSpec
from cudagym.results import StageResult, Status

logger = logging.getLogger(__name__)
POLL_S = 0.05  # the dispatcher's wait for answers between rounds
REPLACE_AFTER_HARNESS_ERRORS = 3  # a worker answering this many jobs in a row with harness errors is replaced


@dataclasses.dataclass(eq=False)
class _Entry:
    """A job as the pool tracks it, from submit to answer."""

    job: Job
    future: Future[StageResult]
    queued: float = dataclasses.field(default_factory=time.monotonic)
    attempts: int = 0
    failed_on: set[int] = dataclasses.field(default_factory=set)  # worker indexes it was lost on
    first_start: float | None = None


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """A look at the pool: jobs queued, running and answered, and the workers."""

    queued: int
    running: int
    done: int
    retried: int
    failed: int
    workers_ready: int
    workers: int
    replaced: int


class RayPool:
    """Evaluation workers on a Ray cluster, and the queue in front of them (see the module doc).

    Args:
        workers: the workers to start (one spec or several: cpu workers for the cpu backend, cuda workers with one
            GPU each).
        address: the cluster to join (``ray.init(address=...)``; None: the one this process joined already, else a
            local one). Ray is started once per process; the pool does not shut it down.
        placement_timeout_s: a job waits at most this long for a worker of its backend to be placed before it is
            answered with a harness error.
        retries: how many times a job lost with its worker is run again on another.
    """

    def __init__(
        self,
        workers: WorkerSpec | Sequence[WorkerSpec],
        *,
        address: str | None = None,
        placement_timeout_s: float = 300.0,
        retries: int = 1,
    ) -> None:
        import ray

        specs = [workers] if isinstance(workers, WorkerSpec) else list(workers)
        if not specs or sum(s.count for s in specs) == 0:
            raise ValueError("the pool needs at least one worker")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.placement_timeout_s = placement_timeout_s
        self.retries = retries
        self.workers = WorkerSet(specs)
        self._watcher = Watcher()
        self._queue: FairQueue[_Entry] = FairQueue(lambda entry: entry.job.client)
        self._lock = threading.Condition()
        self._closed = False
        self._done = self._retried = self._failed = 0
        self._thread = threading.Thread(target=self._loop, name="cudagym-ray-pool", daemon=True)
        self._thread.start()

    # -- the public side ---------------------------------------------------------------------------

    def submit(self, job: Job) -> Future[StageResult]:
        """Queues ``job``; the future's result is its stage result (a harness error where the pool failed)."""
        future: Future[StageResult] = Future()
        with self._lock:
            if self._closed:
                future.set_result(harness_error(job, "the pool is shut down"))
                return future
            if job.backend not in self.workers.backends():
                future.set_result(harness_error(job, f"the pool has no {job.backend} workers"))
                return future
            self._queue.put(_Entry(job, future))
            self._lock.notify()
        return future

    def submit_many(self, jobs: Iterable[Job]) -> list[Future[StageResult]]:
        """Queues a batch; their futures, in the batch's order."""
        return [self.submit(job) for job in jobs]

    def run(self, job: Job) -> StageResult:
        """Submits ``job`` and waits for its result."""
        return self.submit(job).result()

    def stats(self) -> PoolStats:
        with self._lock:
            handles = list(self.workers.handles)
            return PoolStats(
                queued=len(self._queue),
                running=len(self._watcher.running),
                done=self._done,
                retried=self._retried,
                failed=self._failed,
                workers_ready=sum(h.ready for h in handles),
                workers=len(handles),
                replaced=self.workers.replaced,
            )

    def running_on(self) -> list[tuple[Job, WorkerHandle]]:
        """The jobs in flight and the workers running them."""
        with self._lock:
            return [(r.entry.job, r.worker) for r in self._watcher.running.values()]

    def shutdown(self) -> None:
        """Answers queued jobs with harness errors, waits for none, and stops the workers (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify()
        self._thread.join(timeout=30)
        with self._lock:
            for entry in self._queue.items():
                self._answer(entry, harness_error(entry.job, "the pool was shut down before the job ran"))
            for running in self._watcher.running.values():
                self._answer(running.entry, harness_error(running.entry.job, "the pool was shut down"))
            self._watcher.running.clear()
        self.workers.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- the dispatcher ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                if not self._queue and not self._watcher.running:
                    self._lock.wait(timeout=POLL_S * 4)
                try:
                    self._round()
                except Exception:  # the dispatcher must go on: one bad round must not strand every queued job
                    logger.exception("the Ray pool's dispatcher failed a round")
            finished = self._watcher.collect(POLL_S)  # outside the lock: submits go on while it waits
            with self._lock:
                for end in finished:
                    self._settle(end)

    def _round(self) -> None:
        for handle in self.workers.poll_ready():
            self.workers.replace(handle, "it died while starting")
        self._expire_unplaceable()
        while True:
            free = [h for h in self.workers.handles if h.free]
            backends = {h.spec.backend for h in free}
            entry = self._queue.take(lambda e, runnable=backends: e.job.backend in runnable)
            if entry is None:
                return
            if entry.attempts == 0 and not entry.future.set_running_or_notify_cancel():
                continue  # cancelled by its caller while queued
            self._send(entry, self._choose(entry, free))

    def _choose(self, entry: _Entry, free: list[WorkerHandle]) -> WorkerHandle:
        """A free worker of the job's backend: not one it was lost on where there is another, warm for its task
        where one is, the least busy otherwise."""
        fit = [h for h in free if h.spec.backend == entry.job.backend]
        fresh = [h for h in fit if h.index not in entry.failed_on] or fit
        return min(fresh, key=lambda h: (entry.job.key not in h.warm, h.running / h.spec.concurrency, h.index))

    def _send(self, entry: _Entry, handle: WorkerHandle) -> None:
        entry.attempts += 1
        now = time.monotonic()
        entry.first_start = entry.first_start or now
        handle.running += 1
        handle.warm.add(entry.job.key)
        ref = handle.actor.run.remote(entry.job)
        self._watcher.add(Running(entry, handle, ref, now, entry.job.run_deadline_s))
        logger.debug("sent %s to %s (attempt %d)", entry.job.describe(), handle.describe(), entry.attempts)

    def _expire_unplaceable(self) -> None:
        now = time.monotonic()
        for entry in self._queue.items():
            placed = any(h.ready and h.spec.backend == entry.job.backend for h in self.workers.handles)
            if not placed and now - entry.queued > self.placement_timeout_s:
                self._queue.remove(entry)
                if entry.future.set_running_or_notify_cancel():
                    reason = (
                        f"no {entry.job.backend} worker could be placed within {self.placement_timeout_s:.0f} s "
                        "(does any node have the resources the workers ask for?)"
                    )
                    self._answer(entry, harness_error(entry.job, reason, entry.queued))

    def _settle(self, end: Finished) -> None:
        """Answers a job that ended, or runs it again where its worker was lost."""
        running, entry = end.running, end.running.entry
        handle = running.worker
        if handle in self.workers.handles:
            handle.running = max(0, handle.running - 1)
        if end.outcome is Outcome.DONE and end.result is not None:
            if end.result.status is not Status.HARNESS_ERROR:
                handle.harness_errors = 0
                self._answer(entry, end.result)
                return
            # the worker could not evaluate the job (its hosted pool retired the evaluator and retried what was the
            # machine's); the job is tried once more on another worker, and a worker that answers nothing but harness
            # errors (a device left in a bad state) is replaced
            handle.harness_errors += 1
            if handle.harness_errors >= REPLACE_AFTER_HARNESS_ERRORS:
                self._replace(handle, f"it answered {handle.harness_errors} jobs in a row with harness errors")
            if entry.attempts <= self.retries:
                self._retry(entry, handle, end.result.message)
                return
            self._answer(entry, end.result)
            return
        if end.outcome is Outcome.BROKEN:
            self._answer(entry, harness_error(entry.job, f"the worker failed: {end.reason}", entry.first_start))
            return
        self._replace(handle, end.reason)
        if end.outcome is Outcome.WORKER_LOST and entry.attempts <= self.retries:
            self._retry(entry, handle, end.reason)
            return
        reason = f"{handle.describe()}: {end.reason}"
        if end.outcome is Outcome.WORKER_LOST:
            reason = f"the job was lost with its worker {entry.attempts} times; the last: {reason}"
        self._answer(entry, harness_error(entry.job, reason, entry.first_start))

    def _replace(self, handle: WorkerHandle, reason: str) -> None:
        """Swaps ``handle`` for a new worker (once, however many of its jobs ended with it); its other jobs in
        flight were lost with it and are run again."""
        if handle not in self.workers.handles:
            return
        self.workers.replace(handle, reason)
        for running in [r for r in self._watcher.running.values() if r.worker is handle]:
            del self._watcher.running[running.ref]
            self._settle(Finished(running, Outcome.WORKER_LOST, reason=f"its worker was replaced ({reason})"))

    def _retry(self, entry: _Entry, handle: WorkerHandle, reason: str) -> None:
        logger.warning("running %s again: %s lost it (%s)", entry.job.describe(), handle.describe(), reason)
        entry.failed_on.add(handle.index)
        self._retried += 1
        self._queue.put(entry, front=True)

    def _answer(self, entry: _Entry, result: StageResult) -> None:
        if result.status is Status.HARNESS_ERROR:
            self._failed += 1
            logger.warning("%s: %s", entry.job.describe(), result.message)
        self._done += 1
        if not entry.future.done():
            entry.future.set_result(result)
