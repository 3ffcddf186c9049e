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
``raw-...`` reference, as dead letters are) and never raises.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any, Optional

from smqsup import deadletters, message, safe, scripts
from smqsup.broker import Broker
from smqsup.connection import wrapped
from smqsup.errors import MalformedMessage

STATES = ("pending", "scheduled", "processing", "dead")
#: Entries read per page while looking for messages to remove.
PAGE = 1000
#: Characters of a body shown in a listing.
PREVIEW_CHARS = 200
#: Sequence numbers per priority in the priority set's scores (includes/ready.lua).
_PRIORITY_SPAN = 2 ** 44


def ref(frame: bytes) -> str:
    """How a listing names a frame: its message id, or ``raw-`` and a hash
    of its bytes when none can be read."""
    return message.peek_id(frame) or "raw-" + hashlib.sha1(frame).hexdigest()[:16]


def row(frame: bytes, state: str, where: str, due_ms: Optional[float] = None,
        consumer: Optional[str] = None) -> dict[str, Any]:
    """One waiting or held message as every listing shows it: ``id``,
    ``state``, ``where`` (the structure it sits in), ``created_at`` (unix s),
    ``attempts``, ``priority``, ``due_at`` (unix s, scheduled only), ``size``
    (bytes), ``preview`` (the body as JSON text, cut), ``retry``,
    ``consumer`` and ``malformed``. Always encodes as strict JSON."""
    out: dict[str, Any] = {"id": ref(frame), "state": state, "where": where, "created_at": None, "attempts": None,
                           "priority": None, "due_at": _seconds(due_ms), "size": len(frame), "preview": "",
                           "retry": where == "delayed", "consumer": consumer, "malformed": False}
    try:
        msg = message.decode(frame)
    except MalformedMessage:
        out.update(malformed=True, preview=frame[:PREVIEW_CHARS].decode("utf-8", "backslashreplace"))
        return out
    out.update(created_at=msg.created_at if 0 <= msg.created_at < 1e11 else None, attempts=msg.attempts,
               priority=msg.priority, preview=_preview(msg.body))
    return out


def _seconds(ms: Optional[float]) -> Optional[float]:
    return None if ms is None or not 0 <= ms < 1e14 else ms / 1000.0


def _preview(body: Any) -> str:
    try:
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        text = "<body cannot be shown>"
    return safe.escape(text, PREVIEW_CHARS)


def listing(broker: Broker, queue: str, state: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows of the messages of ``queue`` in ``state``
    (partition after partition)."""
    if state == "dead":
        return [_dead_row(raw) for raw in deadletters.newest(broker, queue, limit)]
    rows: list[dict[str, Any]] = []
    for part in broker.partition_names(queue):
        rows += list(_rows(broker, part, state, limit - len(rows)))[:limit - len(rows)]
        if len(rows) >= limit:
            break
    return rows


def _dead_row(raw: bytes) -> dict[str, Any]:
    d = deadletters.row(raw)
    body = d["body"]
    preview = body if isinstance(body, str) else _preview(body)
    return {"id": d["id"], "state": "dead", "where": "dead", "created_at": d["created_at"],
            "attempts": d["attempts"], "priority": None, "due_at": None, "size": len(raw),
            "preview": safe.escape(preview, PREVIEW_CHARS), "retry": False, "consumer": None,
            "malformed": d["malformed"], "reason": d["reason"], "dead_at": d["dead_at"]}


def _rows(broker: Broker, queue: str, state: str, limit: int) -> Iterator[dict[str, Any]]:
    k = broker.keys(queue)
    with wrapped(f"list messages of {queue!r}"):
        client: Any = broker.client  # replies are bytes (decode_responses is off)
        if state == "pending":
            best = list(client.zrange(k.priority, 0, limit - 1, withscores=True))
            ready = list(reversed(client.lrange(k.pending, -limit, -1)))
            for where, frame in _take_order(best, ready, limit):
                yield row(frame, state, where)
        elif state == "scheduled":
            found = [(due, frame, where) for where, key in (("scheduled", k.scheduled), ("delayed", k.delayed))
                     for frame, due in client.zrange(key, 0, limit - 1, withscores=True)]
            for due, frame, where in sorted(found, key=lambda f: f[0]):
                yield row(frame, state, where, due_ms=due)
        elif state == "processing":
            for cid in sorted(client.hkeys(k.consumers)):
                consumer = cid.decode("utf-8", "backslashreplace")
                for frame in client.lrange(k.processing(consumer), 0, limit - 1):
                    yield row(frame, state, "processing", consumer=consumer)
        else:
            raise ValueError(f"state: expected one of {', '.join(STATES)}, got {safe.escape(state, 40)}")


def _take_order(best: list[tuple[bytes, float]], ready: list[bytes], limit: int) -> Iterator[tuple[str, bytes]]:
    """The first ``limit`` (where, frame) in the order take_ready hands them
    out: ``best`` the priority set's members and scores (lowest first),
    ``ready`` the pending list from its consuming end."""
    b = r = 0
    for _ in range(limit):
        if b < len(best) and (r >= len(ready) or _priority(ready[r]) < _set_priority(best[b][1])):
            yield "priority", best[b][0]
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
        return message.frame_head(frame).priority
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
    for part in broker.partition_names(queue):
        left = [mid for mid, removed in done.items() if not removed]
        if not left:
            break
        done.update({mid: True for mid, removed in _remove(broker, part, left).items() if removed})
    return done


def _remove(broker: Broker, queue: str, ids: Sequence[str]) -> dict[str, bool]:
    """remove() in one partition."""
    wanted = set(ids)
    chosen: list[tuple[str, bytes, str, Optional[str]]] = []
    for where, frame in _waiting(broker, queue):
        mid = ref(frame)
        if mid in wanted:
            wanted.discard(mid)
            chosen.append((where, frame, mid, _dedup_key(frame)))
            if not wanted:
                break
    done = dict.fromkeys(ids, False)
    k = broker.keys(queue)
    with wrapped(f"remove messages of {queue!r}"):
        for start in range(0, len(chosen), PAGE):
            part = chosen[start:start + PAGE]
            for (_, _, mid, _), removed in zip(part, scripts.remove(k, part).run(broker.client)):
                done[mid] = removed
    return done


def _dedup_key(frame: bytes) -> Optional[str]:
    try:
        return message.decode(frame).dedup_key
    except MalformedMessage:
        return None


def _waiting(broker: Broker, queue: str) -> Iterator[tuple[str, bytes]]:
    """(where, frame) of every waiting message, page by page."""
    k = broker.keys(queue)
    with wrapped(f"list messages of {queue!r}"):
        client: Any = broker.client  # replies are bytes (decode_responses is off)
        for where, key in (("priority", k.priority), ("scheduled", k.scheduled), ("delayed", k.delayed)):
            start = 0
            while page := client.zrange(key, start, start + PAGE - 1):
                yield from ((where, frame) for frame in page)
                start += PAGE
        start = 0
        while page := client.lrange(k.pending, start, start + PAGE - 1):
            yield from (("pending", frame) for frame in page)
            start += PAGE
