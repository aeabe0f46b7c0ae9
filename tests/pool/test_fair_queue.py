"""The fair queue both evaluation pools share: clients in turn, each client's items in order."""

from __future__ import annotations

from cudagym.pool.fair_queue import FairQueue


def _queue(*items: str) -> FairQueue[str]:
    queue: FairQueue[str] = FairQueue(lambda item: item[0])  # the client is the item's first letter
    for item in items:
        queue.put(item)
    return queue


def _drain(queue: FairQueue[str]) -> list[str]:
    taken = []
    while (item := queue.take(lambda _: True)) is not None:
        taken.append(item)
    return taken


def test_clients_are_served_in_turn_not_in_order_of_arrival() -> None:
    queue = _queue("a1", "a2", "a3", "a4", "b1", "c1", "c2")
    assert _drain(queue) == ["a1", "b1", "c1", "a2", "c2", "a3", "a4"]
    assert len(queue) == 0 and queue.clients() == []


def test_a_client_that_arrives_later_waits_one_turn_not_for_a_busy_clients_backlog() -> None:
    queue = _queue("a1", "a2", "a3")
    assert queue.take(lambda _: True) == "a1"
    queue.put("b1")
    assert queue.take(lambda _: True) == "a2"  # a's turn came before b arrived
    assert queue.take(lambda _: True) == "b1"  # then b, not a3


def test_take_skips_items_that_cannot_start_and_keeps_their_place() -> None:
    queue = _queue("a1", "a2", "b1")
    assert queue.take(lambda item: item != "a1") == "a2"  # a's first job waits (its evaluator is busy)
    assert queue.take(lambda item: item != "a1") == "b1"
    assert queue.take(lambda item: item != "a1") is None
    assert queue.items() == ["a1"]


def test_put_front_goes_before_the_clients_other_items() -> None:
    queue = _queue("a2")
    queue.put("a1", front=True)
    queue.remove("a2")
    assert _drain(queue) == ["a1"]
