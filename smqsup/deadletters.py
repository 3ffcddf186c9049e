"""Choosing, showing, requeueing and purging dead letters: one implementation
for the ``smqsup dlq`` command and the web UI.

Whatever bytes sit in a dead-letter list, each entry can be shown (``row``)
and named in a requeue or purge: by its message id, or, when none can be
read, by the ``raw-...`` reference ``row`` gives it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Optional

from smqsup.broker import Broker
from smqsup.message import DeadLetter, too_deep

#: Dead-letter entries read per LRANGE page.
PAGE = 1000
#: A dead letter's body longer than this (as JSON text) is cut in listings, in characters.
BODY_SHOWN_CHARS = 64 * 1024


def row(raw: bytes) -> dict[str, Any]:
    """One dead-letter entry as every listing shows it: ``id`` (the message
    id, or a ``raw-...`` reference when the bytes hold none), ``attempts``,
    ``reason``, ``dead_at`` and ``created_at`` (unix s), ``error_type``,
    ``body`` (cut past BODY_SHOWN_CHARS, with ``truncated``) and
    ``malformed``. A malformed entry shows its bytes as text, undecodable
    bytes as backslash escapes. The row always encodes as strict JSON."""
    d = DeadLetter(raw)
    msg = d.message()
    body: Any = msg.body if msg is not None else d.frame.decode("utf-8", "backslashreplace")
    try:
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    except (RecursionError, ValueError):  # decodable yet too deep to encode again
        text = body = d.frame.partition(b"|")[2].decode("utf-8", "backslashreplace")
    if not isinstance(body, str) and too_deep(text):
        body = text  # shown as its text: a listing never nests deeper than a publish may
    truncated = len(text) > BODY_SHOWN_CHARS
    error_type = d.meta.get("error_type")
    created = msg.created_at if msg is not None and math.isfinite(msg.created_at) else None
    return {"id": d.ref, "attempts": msg.attempts if msg else None, "reason": d.reason, "dead_at": d.at,
            "created_at": created, "error_type": error_type if isinstance(error_type, str) else None,
            "body": text[:BODY_SHOWN_CHARS] if truncated else body, "truncated": truncated,
            "malformed": msg is None}


def newest(broker: Broker, queue: str, limit: int) -> list[bytes]:
    """Up to ``limit`` dead-letter entries of ``queue``, newest first within
    each of its partitions, partition after partition."""
    entries: list[bytes] = []
    for part in broker.partition_names(queue):
        if len(entries) >= limit:
            break
        entries += broker.dead_letters(part, 0, limit - len(entries))
    return entries


def select(broker: Broker, queue: str, ids: set[str]) -> list[bytes]:
    """The dead-letter entries of ``queue`` (all its partitions) whose message
    id (or ``raw-...`` reference) is in ``ids``."""
    return [raw for part in broker.partition_names(queue) for raw in _select(broker, part, ids)]


def _select(broker: Broker, queue: str, ids: set[str]) -> list[bytes]:
    """select() in one partition, newest first, read page by page until all
    are found."""
    chosen: list[bytes] = []
    start = 0
    while True:
        batch = broker.dead_letters(queue, start, PAGE)
        for raw in batch:
            if DeadLetter(raw).ref in ids:
                chosen.append(raw)
        if len(batch) < PAGE or len(chosen) >= len(ids):
            return chosen
        start += PAGE


def requeue(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    """Move the dead letters with these message ids (None: all) back to
    pending, attempts reset, each in its partition; returns how many moved.
    An entry that another operator moved meanwhile is skipped (the script
    removes by value)."""
    return sum(_requeue(broker, part, ids) for part in broker.partition_names(queue))


def _requeue(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    if ids is not None:
        return broker.dlq_requeue(queue, _select(broker, queue, set(ids)))
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


def _with_keys(entries: Sequence[bytes]) -> list[tuple[bytes, str, Optional[str]]]:
    """(entry, message id, dedup key or None) of each entry, for dlq_delete."""
    out = []
    for raw in entries:
        d = DeadLetter(raw)
        msg = d.message()
        out.append((raw, d.ref, msg.dedup_key if msg is not None else None))
    return out


def purge(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    """Delete the dead letters with these message ids (None: all); returns
    how many. The dedup key of a purged message is freed (when it still
    names that message), so the key can be used again at once.

    A whole purge sets the list aside in one step (Broker.dlq_set_aside),
    then frees the dedup keys of what it held, page by page, and deletes it:
    an entry requeued meanwhile by another operator was requeued before the
    purge took the list, and keeps its key. Each partition in turn."""
    return sum(_purge(broker, part, ids) for part in broker.partition_names(queue))


def _purge(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    if ids is not None:
        return broker.dlq_delete(queue, _with_keys(_select(broker, queue, set(ids))))
    aside, count = broker.dlq_set_aside(queue)
    start = 0
    while start < count:
        page = broker.list_page(aside, start, PAGE)
        if not page:
            break
        held = [entry for entry in _with_keys(page) if entry[2] is not None]
        if held:
            # Deleting these shifts the rest of the list back.
            start -= broker.dlq_delete(queue, held, dead_key=aside)
        start += len(page)
    broker.delete(aside)
    return count
