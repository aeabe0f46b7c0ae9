"""A queue that serves its clients in turn: round robin over the clients that have work, not first come first served.

Both evaluation pools (:mod:`cudagym.pool`, one machine; :mod:`cudagym.ray_pool`, a cluster) queue jobs from many
environments (or a trainer's batches) this way, so a client that submits hundreds of jobs does not hold back another
environment's single verify: the next job comes from the client after the one served last.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Generic, TypeVar

Item = TypeVar("Item")


class FairQueue(Generic[Item]):
    """Items by client (``client_of(item)``), taken in turn; within one client, in the order they were put.

    Not thread-safe: its owner holds a lock around it.
    """

    def __init__(self, client_of: Callable[[Item], str]) -> None:
        self._client_of = client_of
        self._queues: collections.OrderedDict[str, collections.deque[Item]] = collections.OrderedDict()

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def clients(self) -> list[str]:
        """The clients with queued items, in the order they will be served."""
        return list(self._queues)

    def put(self, item: Item, *, front: bool = False) -> None:
        """Queues ``item`` behind its client's others (``front``: before them, e.g. a job run again)."""
        queue = self._queues.setdefault(self._client_of(item), collections.deque())
        if front:
            queue.appendleft(item)
        else:
            queue.append(item)

    def items(self) -> list[Item]:
        """Every queued item (clients in turn order, each client's in its order)."""
        return [item for q in self._queues.values() for item in q]

    def remove(self, item: Item) -> None:
        client = self._client_of(item)
        queue = self._queues[client]
        queue.remove(item)
        if not queue:
            del self._queues[client]

    def take(self, accept: Callable[[Item], bool]) -> Item | None:
        """The next item in fair order that ``accept`` takes (each client's first accepted one); its client goes to
        the back of the turn. None when no queued item is accepted."""
        for client, queue in list(self._queues.items()):
            item = next((i for i in queue if accept(i)), None)
            if item is None:
                continue
            queue.remove(item)
            del self._queues[client]
            if queue:
                self._queues[client] = queue  # to the back of the turn
            return item
        return None
