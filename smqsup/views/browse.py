"""The messages of a queue as an operator sees them: listed by state
(``smqsup messages``, the web UI) and removed by id while they wait
(``smqsup remove``). One implementation for the CLI and the web UI.

    pending     ready to be taken, in the order consumers take them
                (includes/ready.lua: the priority set and the pending list
                merged by priority, the list first on a tie)
    scheduled   published for later, and retries waiting (``retry`` true),
                soonest first
    processing  held by a consumer (the consumer's id in ``consumer``)
    dead        dead letters, newest first (``reason``)

Whatever bytes sit there, each message is listed (a malformed one by a
``raw-...`` reference, as dead letters are) and never raises. One listing
reads a bounded number of bytes however large the frames (scripts.ReadBudget,
peek_range.lua): a frame beyond the bound is listed from its head (``cut``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any, Optional

from smqsup import framing, message, safe
from smqsup.errors import MalformedMessage
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.scripts import Peeked, ReadBudget
from smqsup.views import deadletters

STATES = ("pending", "scheduled", "processing", "dead")
#: Characters of a body shown in a listing.
PREVIEW_CHARS = 200
#: Sequence numbers per priority in the priority set's scores (includes/ready.lua).
_PRIORITY_SPAN = 2 ** 44


def ref(frame: bytes) -> str:
    """How a listing names a frame: its message id, or ``raw-`` and a hash
    of its bytes when none can be read."""
    return framing.peek_id(frame) or "raw-" + hashlib.sha1(frame).hexdigest()[:16]


def row(frame: bytes, state: str, where: str, due_ms: Optional[float] = None,
        consumer: Optional[str] = None) -> dict[str, Any]:
    """One waiting or held message as every listing shows it: ``id``,
    ``state``, ``where`` (the structure it sits in), ``created_at`` (unix s),
    ``attempts``, ``priority``, ``due_at`` (unix s, scheduled only), ``size``
    (bytes), ``preview`` (the body as JSON text, cut), ``retry``,
    ``consumer``, ``malformed`` and ``cut`` (false here: see _cut_row).
    Always encodes as strict JSON."""
    out = _blank(ref(frame), state, where, due_ms, consumer, len(frame))
    try:
        msg = message.decode(frame)
    except MalformedMessage:
        out.update(malformed=True, preview=frame[:PREVIEW_CHARS].decode("utf-8", "backslashreplace"))
        return out
    out.update(created_at=msg.created_at if 0 <= msg.created_at < 1e11 else None, attempts=msg.attempts,
               priority=msg.priority, preview=_preview(msg.body), group=msg.group)
    return out


def _blank(mid: str, state: str, where: str, due_ms: Optional[float], consumer: Optional[str],
           size: int) -> dict[str, Any]:
    return {"id": mid, "state": state, "where": where, "created_at": None, "attempts": None, "priority": None,
            "due_at": _seconds(due_ms), "size": size, "preview": "", "retry": where == "delayed",
            "consumer": consumer, "malformed": False, "cut": False, "group": None}


def _row_of(seen: Peeked, state: str, where: str, due_ms: Optional[float] = None,
            consumer: Optional[str] = None) -> dict[str, Any]:
    """row() of an element as a listing read it."""
    if seen.cut:
        return _cut_row(seen, state, where, due_ms, consumer)
    return row(seen.data, state, where, due_ms, consumer)


def _cut_row(seen: Peeked, state: str, where: str, due_ms: Optional[float],
             consumer: Optional[str]) -> dict[str, Any]:
    """row() of a frame too large for the listing to read whole, from its
    head: ``cut`` true, ``size`` its real length, the id, attempts and
    priority its head holds, no ``created_at`` (the envelope has it after the
    body), ``preview`` the body as far as the head goes; ``malformed`` when
    the head is no frame's."""
    out = _blank(deadletters.cut_ref(seen.data, seen), state, where, due_ms, consumer, seen.size)
    out["cut"] = True
    try:
        head = framing.frame_head(seen.data)
    except MalformedMessage:
        out.update(malformed=True, preview=seen.data[:PREVIEW_CHARS].decode("utf-8", "backslashreplace"))
        return out
    out.update(attempts=head.attempts, priority=head.priority,
               preview=safe.escape(deadletters.body_head(head.payload), PREVIEW_CHARS))
    return out


def _seconds(ms: Optional[float]) -> Optional[float]:
    return None if ms is None or not 0 <= ms < 1e14 else ms / 1000.0


def _preview(body: Any) -> str:
    try:
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        text = "<body cannot be shown>"
    return safe.escape(text, PREVIEW_CHARS)


def listing(broker: Broker, queue: str, state: str, limit: int, group: Optional[str] = None) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of the messages of ``queue`` in ``state``
    (partition after partition), read within one ReadBudget whatever Redis
    holds: each frame's head from LISTING_HEADS_BYTES shared (between
    LISTING_HEAD_MIN_BYTES and LISTING_HEAD_MAX_BYTES each) and whole frames
    from LISTING_WHOLE_BYTES more. With ``group``: only that message
    group's (its waiting ones in the order they go)."""
    if group is not None:
        return _group_listing(broker, queue, state, limit, group)
    if state == "dead":
        return [_dead_row(entry) for entry in deadletters.newest(broker, queue, limit)]
    if state not in STATES:
        raise ValueError(f"state: expected one of {', '.join(STATES)}, got {safe.escape(state, 40)}")
    # pending and scheduled read two structures, up to ``limit`` each.
    budget = ReadBudget.for_rows(limit if state == "processing" else 2 * limit)
    rows: list[dict[str, Any]] = []
    for part in broker.queues.partition_names(queue):
        rows += list(_rows(broker, part, state, limit - len(rows), budget))[:limit - len(rows)]
        if len(rows) >= limit:
            break
    return rows


def _group_listing(broker: Broker, queue: str, state: str, limit: int, group: str) -> list[dict[str, Any]]:
    """listing() of one group: its waiting messages from its range of the
    groups' ready set (in its partition), the other states' rows filtered."""
    if state != "pending":
        return [r for r in listing(broker, queue, state, 10 * limit) if r["group"] == group][:limit]
    part = broker.groups.partition(queue, group)
    return [row(framing.member_frame(m), state, "group") for m in broker.contents.group_waiting(part, group, limit)]


def _member(seen: Peeked) -> Peeked:
    """An element of the groups' ready set (read with the separator
    b"\\n") as its frame."""
    if not seen.cut:
        frame = framing.member_frame(seen.data)
        return dataclasses.replace(seen, size=len(frame), data=frame, after=None)
    return dataclasses.replace(seen, size=max(0, seen.size - len(seen.data) - 1), data=seen.after or b"", after=None)


def _dead_row(entry: Peeked) -> dict[str, Any]:
    d = deadletters.row(entry)
    body = d["body"]
    preview = body if isinstance(body, str) else _preview(body)
    return {"id": d["id"], "state": "dead", "where": "dead", "created_at": d["created_at"],
            "attempts": d["attempts"], "priority": None, "due_at": None, "size": entry.size,
            "preview": safe.escape(preview, PREVIEW_CHARS), "retry": False, "consumer": None,
            "malformed": d["malformed"], "cut": d["cut"], "reason": d["reason"], "dead_at": d["dead_at"]}


def _rows(broker: Broker, queue: str, state: str, limit: int, budget: ReadBudget) -> Iterator[dict[str, Any]]:
    k = broker.keys(queue)
    if state == "pending":
        best = broker.contents.peek_range(k.priority, "zset", limit, budget)
        # The pending list from its consuming end.
        ready = [seen for seen in broker.contents.peek_range(k.pending, "list", limit, budget, first=-1, step=-1)
                 if not framing.is_ticket(seen.data)]  # (a group's turn is no message)
        shown = 0
        for where, seen in _take_order(best, ready, limit):
            shown += 1
            yield _row_of(seen, state, where)
        if shown < limit:  # then the groups' ready messages, group by group
            for seen in broker.contents.peek_range(k.groups[0], "zset", limit - shown, budget, split=b"\n"):
                yield _row_of(_member(seen), state, "group")
    elif state == "scheduled":
        found = [(_score(seen), seen, where) for where, key in (("scheduled", k.scheduled), ("delayed", k.delayed))
                 for seen in broker.contents.peek_range(key, "zset", limit, budget)]
        for due, seen, where in sorted(found, key=lambda f: f[0]):
            yield _row_of(seen, state, where, due_ms=due)
    else:
        yield from _held(broker, queue, k, limit, budget)


def _held(broker: Broker, queue: str, k: QueueKeys, limit: int, budget: ReadBudget) -> Iterator[dict[str, Any]]:
    """Rows of the consumers' processing lists, consumer after consumer (by
    id), ``limit`` in all."""
    left = limit
    for consumer in broker.contents.holders(queue):
        if left <= 0:
            return
        rows = [_row_of(seen, "processing", "processing", consumer=consumer)
                for seen in broker.contents.peek_range(k.processing(consumer), "list", left, budget)]
        left -= len(rows)
        progress = broker.tracking.progresses(queue, [row["id"] for row in rows if row["id"]])
        for row in rows:
            row["progress"] = progress.get(row["id"])
            yield row


def _score(seen: Peeked) -> float:
    """A sorted set member's score (peek_range reads one for each)."""
    return seen.score if seen.score is not None else 0.0


def _take_order(best: list[Peeked], ready: list[Peeked], limit: int) -> Iterator[tuple[str, Peeked]]:
    """The first ``limit`` (where, element) in the order take_ready hands
    them out: ``best`` the priority set's members (lowest score first),
    ``ready`` the pending list from its consuming end."""
    b = r = 0
    for _ in range(limit):
        if b < len(best) and (r >= len(ready) or _priority(ready[r].data) < _set_priority(_score(best[b]))):
            yield "priority", best[b]
            b += 1
        elif r < len(ready):
            yield "pending", ready[r]
            r += 1


def _set_priority(score: float) -> int:
    """A priority set score's priority, as take_ready reads it (a score no
    script wrote, +inf or -inf included, counts as 0 to 9)."""
    if not math.isfinite(score):
        return 9 if score < 0 else 0
    return min(9, max(0, 9 - int(score // _PRIORITY_SPAN)))


def _priority(frame: bytes) -> int:
    try:
        return framing.frame_head(frame).priority
    except MalformedMessage:
        return 0


def remove(broker: Broker, queue: str, ids: Sequence[str]) -> dict[str, bool]:
    """Delete the waiting messages (pending, scheduled, retries waiting) with
    these ids (or ``raw-...`` references); per id whether it was removed.
    An id found nowhere, or taken by a consumer before the delete, is not
    removed: a message in flight is never touched. Removing a message frees
    its dedup key (if it still names it). Reads each structure page by page
    until every id is found. Each partition of the queue in turn."""
    done = dict.fromkeys(ids, False)
    for part in broker.queues.partition_names(queue):
        left = [mid for mid, removed in done.items() if not removed]
        if not left:
            break
        done.update({mid: True for mid, removed in _remove(broker, part, left).items() if removed})
    return done


def _remove(broker: Broker, queue: str, ids: Sequence[str]) -> dict[str, bool]:
    """remove() in one partition."""
    wanted = set(ids)
    chosen: list[tuple[str, bytes, str, Optional[str]]] = []
    for where, frame in broker.contents.waiting(queue):
        own = framing.member_frame(frame) if where == "group" else frame
        mid = ref(own)
        if mid in wanted:
            wanted.discard(mid)
            chosen.append((where, frame, mid, _dedup_key(own)))
            if not wanted:
                break
    done = dict.fromkeys(ids, False)
    for (_, _, mid, _), removed in zip(chosen, broker.contents.remove(queue, chosen)):
        done[mid] = removed
    return done


def _dedup_key(frame: bytes) -> Optional[str]:
    try:
        return message.decode(frame).dedup_key
    except MalformedMessage:
        return None
