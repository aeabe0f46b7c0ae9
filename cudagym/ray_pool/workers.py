"""The pool's workers: Ray actors placed by the resources they ask for, replaced when one is lost.

A :class:`WorkerSpec` says what kind of worker to start and how many: cuda workers ask Ray for one GPU each
(``num_gpus=1``) and so land on GPU nodes, one per GPU; cpu workers (the cpu backend, whose compiles and runs are
all on the CPU) ask for CPUs only. Extra custom resources pin workers to labelled nodes. Placement is Ray's: the
actors go where the resources are, spread over the nodes, and one whose resources no node has stays pending (its
jobs then come back as harness errors, ``RayPool``'s ``placement_timeout_s``).

A worker that died (its process, its node) is replaced by a new actor of the same spec: Ray's own actor restarts
are off (``max_restarts=0``) so that the pool knows which jobs were lost with it and retries them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from cudagym.pool.jobs import TaskKey
from cudagym.ray_pool.worker import EvalWorker, WorkerInfo

logger = logging.getLogger(__name__)
CUDA_CONCURRENCY = 16  # a cuda worker's jobs at once by default: what its hosted pool compiles and queues meanwhile


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """A kind of worker and how many of it the pool keeps.

    Attributes:
        backend: "cpu" or "cuda".
        count: how many workers of this kind.
        num_cpus: CPUs Ray reserves for each (compiles and the cpu backend's runs use them).
        num_gpus: GPUs for each: 1 for cuda (the default there), 0 for cpu.
        resources: custom Ray resources each needs (a node label such as ``{"eval_node": 1}``).
        concurrency: jobs one worker takes at a time (default: ``CUDA_CONCURRENCY`` on cuda, whose worker's hosted pool
            queues them for the device's memory and timing slot and compiles them meanwhile; 1 on cpu, whose jobs use
            the worker's CPUs).
        max_evaluators: evaluators a worker keeps, busy or idle (default: the machine pool's bound for the backend,
            ``PoolLimits.for_backend``: on cuda one per memory slot of the GPU).
        cache_dir: the compile and baseline cache on the worker's node (default ``~/.cache/cudagym`` there).
    """

    backend: str = "cpu"
    count: int = 1
    num_cpus: float = 1.0
    num_gpus: float | None = None
    # not hashed (a dict is not hashable); equal specs still hash alike, and factories holding specs are dict keys
    resources: dict[str, float] = dataclasses.field(default_factory=dict, hash=False)
    concurrency: int | None = None  # None: the backend's default, set at construction
    max_evaluators: int | None = None
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        if self.concurrency is None:
            object.__setattr__(self, "concurrency", CUDA_CONCURRENCY if self.backend == "cuda" else 1)
        if self.backend not in ("cpu", "cuda"):
            raise ValueError(f"backend must be 'cpu' or 'cuda', got {self.backend!r}")
        if self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.backend == "cuda" and self.gpus <= 0:
            raise ValueError("a cuda worker needs a GPU (num_gpus > 0)")

    @property
    def gpus(self) -> float:
        """The GPUs Ray reserves for each worker."""
        if self.num_gpus is not None:
            return self.num_gpus
        return 1.0 if self.backend == "cuda" else 0.0

    def actor_options(self) -> dict[str, Any]:
        """The options of ``ray.remote(...).options`` for one worker of this spec."""
        return {
            "num_cpus": self.num_cpus,
            "num_gpus": self.gpus,
            "resources": dict(self.resources),
            "max_concurrency": self.concurrency,
            "max_restarts": 0,  # the pool replaces a lost worker itself, knowing which jobs went with it
            "max_task_retries": 0,
            "scheduling_strategy": "SPREAD",
        }


@dataclasses.dataclass(eq=False)
class WorkerHandle:
    """One worker actor as the pool sees it.

    Attributes:
        spec: its kind.
        index: its place among the pool's workers (a replacement takes the same index).
        actor: the Ray actor handle.
        ready_ref: the answer to ``ready`` (None once received).
        info: where it runs, once ready.
        running: jobs it runs now.
        warm: the task keys of the jobs it ran (the pool sends a task's jobs where it is warm).
        started: when the actor was asked for (``time.monotonic``).
        generation: how many workers held this index before it.
        harness_errors: the jobs it answered with harness errors since its last other answer.
    """

    spec: WorkerSpec
    index: int
    actor: Any
    ready_ref: Any
    info: WorkerInfo | None = None
    running: int = 0
    warm: set[TaskKey] = dataclasses.field(default_factory=set)
    started: float = dataclasses.field(default_factory=time.monotonic)
    generation: int = 0
    harness_errors: int = 0

    @property
    def ready(self) -> bool:
        return self.info is not None

    @property
    def free(self) -> bool:
        return self.ready and self.running < self.spec.concurrency

    def describe(self) -> str:
        where = f"pid {self.info.pid} on node {self.info.node_id[:8]}" if self.info else "not placed yet"
        return f"{self.spec.backend} worker {self.index} ({where})"


class WorkerSet:
    """The pool's workers, started from their specs; ``replace`` swaps a lost one for a new actor."""

    def __init__(self, specs: Sequence[WorkerSpec]) -> None:
        import ray

        self._ray = ray
        self._actor_class = ray.remote(EvalWorker)
        self.handles: list[WorkerHandle] = []
        for spec in specs:
            for _ in range(spec.count):
                self.handles.append(self._start(spec, len(self.handles), 0))
        self.replaced = 0

    def _start(self, spec: WorkerSpec, index: int, generation: int) -> WorkerHandle:
        actor = self._actor_class.options(**spec.actor_options()).remote(
            spec.backend, spec.cache_dir, spec.max_evaluators, spec.concurrency
        )
        logger.debug("asked Ray for %s worker %d (generation %d)", spec.backend, index, generation)
        return WorkerHandle(spec, index, actor, actor.ready.remote(), generation=generation)

    def backends(self) -> set[str]:
        return {h.spec.backend for h in self.handles}

    def poll_ready(self) -> list[WorkerHandle]:
        """Takes in the answers of workers that got placed since; returns those that died before answering."""
        pending = {h.ready_ref: h for h in self.handles if h.ready_ref is not None}
        if not pending:
            return []
        done, _ = self._ray.wait(list(pending), num_returns=len(pending), timeout=0)
        lost = []
        for ref in done:
            handle = pending[ref]
            handle.ready_ref = None
            try:
                handle.info = self._ray.get(ref)
                logger.info("%s is ready", handle.describe())
            except self._ray.exceptions.RayError as exc:
                logger.warning("%s died while starting: %s", handle.describe(), exc)
                lost.append(handle)
        return lost

    def replace(self, handle: WorkerHandle, reason: str) -> WorkerHandle:
        """Stops ``handle``'s actor (if it still runs) and starts a new one of its spec in its place."""
        logger.warning("replacing %s: %s", handle.describe(), reason)
        self._kill(handle)
        new = self._start(handle.spec, handle.index, handle.generation + 1)
        self.handles[self.handles.index(handle)] = new
        self.replaced += 1
        return new

    def _kill(self, handle: WorkerHandle) -> None:
        try:
            self._ray.kill(handle.actor, no_restart=True)
        except Exception as exc:  # already gone with its node: nothing to stop
            logger.debug("%s could not be killed: %s", handle.describe(), exc)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Asks every placed worker to close its evaluators, then stops the actors."""
        ready = [h for h in self.handles if h.ready]
        refs = [h.actor.shutdown.remote() for h in ready]
        if refs:
            self._ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        for handle in self.handles:
            self._kill(handle)
        self.handles = []
