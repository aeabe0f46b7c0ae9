"""Watches the jobs in flight: which finished, which were lost with their worker or node, which overran.

Ray reports a lost actor to the caller of its methods (``RayActorError`` and its kinds: the process died, its node
died, it cannot be reached); the watcher also asks Ray which nodes are alive (once a second), so that jobs on a node
that went away are taken back before Ray's own detection reaches each call. Each finished call is classified:

* ``DONE``: the worker answered with a result (which may say that the candidate failed: that is data, not a loss);
* ``WORKER_LOST``: the worker or its node is gone; the pool replaces the worker and runs the job again elsewhere,
  once, before answering with a harness error;
* ``BROKEN``: the worker's method raised (a bug, not a loss): the job's answer is a harness error.

A job that runs past its deadline is ``OVERDUE``: its worker is taken to be stuck and is replaced.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from typing import Any

from cudagym.ray_pool.workers import WorkerHandle
from cudagym.results import StageResult

logger = logging.getLogger(__name__)
NODE_POLL_S = 1.0  # how often the list of live nodes is read


class Outcome(enum.Enum):
    """How a job in flight ended."""

    DONE = "done"
    WORKER_LOST = "worker_lost"
    BROKEN = "broken"
    OVERDUE = "overdue"


@dataclasses.dataclass(eq=False)
class Running:
    """A job sent to a worker: ``entry`` is the pool's record of it, ``ref`` the answer to come."""

    entry: Any
    worker: WorkerHandle
    ref: Any
    started: float
    deadline_s: float


@dataclasses.dataclass(frozen=True)
class Finished:
    """One job's end as the watcher saw it: the result for ``DONE``, else why it has none."""

    running: Running
    outcome: Outcome
    result: StageResult | None = None
    reason: str = ""


class Watcher:
    """The pool's jobs in flight, and what became of them."""

    def __init__(self) -> None:
        import ray

        self._ray = ray
        self.running: dict[Any, Running] = {}
        self._nodes_read = 0.0
        self._dead_nodes: set[str] = set()

    def add(self, running: Running) -> None:
        self.running[running.ref] = running

    def collect(self, timeout_s: float) -> list[Finished]:
        """Waits up to ``timeout_s`` for answers; returns every job that ended (answered, lost or overdue)."""
        finished: list[Finished] = []
        if self.running:
            refs = list(self.running)
            done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=timeout_s, fetch_local=True)
            finished += [self._classify(self.running.pop(ref)) for ref in done]
        elif timeout_s > 0:
            time.sleep(timeout_s)
        finished += self._on_dead_nodes()
        finished += self._overdue()
        return finished

    def _classify(self, running: Running) -> Finished:
        exceptions = self._ray.exceptions
        try:
            return Finished(running, Outcome.DONE, result=self._ray.get(running.ref))
        except (exceptions.RayActorError, exceptions.WorkerCrashedError, exceptions.NodeDiedError) as exc:
            return Finished(running, Outcome.WORKER_LOST, reason=f"{type(exc).__name__}: {_first_line(exc)}")
        except (exceptions.ObjectLostError, exceptions.OwnerDiedError) as exc:
            return Finished(running, Outcome.WORKER_LOST, reason=f"its answer was lost: {_first_line(exc)}")
        except exceptions.RayError as exc:
            return Finished(running, Outcome.BROKEN, reason=f"{type(exc).__name__}: {_first_line(exc)}")

    def dead_nodes(self) -> set[str]:
        """The ids of nodes Ray no longer counts alive (read at most once per ``NODE_POLL_S``)."""
        now = time.monotonic()
        if now - self._nodes_read >= NODE_POLL_S:
            self._nodes_read = now
            try:
                self._dead_nodes = {n["NodeID"] for n in self._ray.nodes() if not n.get("Alive", False)}
            except Exception as exc:  # the GCS did not answer this time: the calls themselves still fail over
                logger.debug("could not read Ray's node list: %s", exc)
        return self._dead_nodes

    def _on_dead_nodes(self) -> list[Finished]:
        dead = self.dead_nodes()
        lost = [r for r in self.running.values() if r.worker.info is not None and r.worker.info.node_id in dead]
        for running in lost:
            del self.running[running.ref]
        return [Finished(r, Outcome.WORKER_LOST, reason="its node left the cluster") for r in lost]

    def _overdue(self) -> list[Finished]:
        now = time.monotonic()
        late = [r for r in self.running.values() if now - r.started > r.deadline_s]
        for running in late:
            del self.running[running.ref]
        return [
            Finished(running, Outcome.OVERDUE, reason=f"no answer within its deadline of {running.deadline_s:.0f} s")
            for running in late
        ]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
