"""Choosing, requeueing and purging dead letters: one implementation for the
``smqsup dlq`` command and the web UI."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from smqsup.broker import Broker
from smqsup.message import DeadLetter

#: Dead-letter entries read per LRANGE page.
PAGE = 1000


def select(broker: Broker, queue: str, ids: set[str]) -> list[bytes]:
    """The dead-letter entries of ``queue`` whose message id is in ``ids``
    (newest first), read page by page until all are found."""
    chosen: list[bytes] = []
    start = 0
    while True:
        batch = broker.dead_letters(queue, start, PAGE)
        for raw in batch:
            msg = DeadLetter(raw).message()
            if msg is not None and msg.id in ids:
                chosen.append(raw)
        if len(batch) < PAGE or len(chosen) >= len(ids):
            return chosen
        start += PAGE


def requeue(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    """Move the dead letters with these message ids (None: all) back to
    pending, attempts reset; returns how many moved. An entry that another
    operator moved meanwhile is skipped (the script removes by value)."""
    if ids is not None:
        return broker.dlq_requeue(queue, select(broker, queue, set(ids)))
    # All: oldest first, in pages, and no more than were there at the start:
    # a requeued message that dies again meanwhile re-enters at the head and
    # stays there.
    budget = broker.sizes(queue)["dead"]
    moved = 0
    while moved < budget:
        page = min(PAGE, budget - moved)
        n = broker.dlq_requeue(queue, broker.dead_letters(queue, -page, page))  # the oldest
        if n == 0:
            break
        moved += n
    return moved


def purge(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    """Delete the dead letters with these message ids (None: all); returns how many."""
    if ids is None:
        return broker.dlq_purge(queue)
    return broker.dlq_remove(queue, select(broker, queue, set(ids)))
