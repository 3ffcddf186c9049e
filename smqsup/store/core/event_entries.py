"""Queues' event streams as Events, for both drivers, no I/O: one Event per
stream entry (anything malformed read as "malformed", never raised), the
cursors (after what, in what order), the partitions' replies merged."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from smqsup import safe
from smqsup.keys import QueueKeys
from smqsup.store.core.plans import Blocking, Command, Plan, Request
from smqsup.store.core.replies import text

#: Every event the scripts write (anything else in a stream reads as "malformed").
EVENTS = frozenset({"published", "released", "started", "progress", "retried", "done", "dead", "expired",
                    "cancelled", "removed", "reclaimed", "returned", "requeued"})


#: Longest text of a malformed entry an Event keeps.
_MALFORMED_TEXT = 200


#: Longest one blocking read waits at once, ms: well inside every client's socket timeout.
BLOCK_SLICE_MS = 1000


@dataclass(frozen=True)
class Event:
    """One entry of a queue's event stream. ``cursor`` is its entry id
    ("ms-seq": read on after it with since=), ``at_ms`` when it was written
    (Redis clock), ``queue`` the partition it is in, ``data`` the dead-letter
    metadata (dead, expired, cancelled, removed: {"reason"...}) or the
    progress value, else None. An entry that is not what the scripts write
    (garbage someone put there) is event "malformed", its text in ``data``."""

    cursor: str
    queue: str
    event: str
    message_id: str
    attempts: int
    at_ms: int
    data: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "queue": self.queue, "event": self.event, "id": self.message_id,
                "attempts": self.attempts, "at_ms": self.at_ms, "data": self.data}


def parse(queue: str, entry_id: Any, fields: Any) -> Event:
    """The Event of one stream entry as XREAD or XRANGE returned it."""
    cursor = text(entry_id) if isinstance(entry_id, (bytes, str)) else "0-0"
    at_ms = _at_ms(cursor)
    got = _fields(fields)
    event, mid, attempts = got.get("event"), got.get("id"), got.get("attempts", "")
    if event not in EVENTS or not mid or not (attempts.isascii() and attempts.isdigit() and len(attempts) <= 9):
        shown = " ".join(f"{k}={v}" for k, v in got.items())[:_MALFORMED_TEXT]
        return Event(cursor, queue, "malformed", mid or "", 0, at_ms, shown)
    data = got.get("data")  # (scrubbed: entries written by hand or by older code may hold a secret)
    return Event(cursor, queue, event, mid, int(attempts), at_ms,
                 None if data is None else _json_or_text(safe.scrub(data)))


def _fields(fields: Any) -> dict[str, str]:
    """An entry's fields as texts: redis-py's parsed reply gives a dict, a
    raw one (the asyncio driver's) a flat [field, value, ...] list;
    anything else: none."""
    if isinstance(fields, list) and len(fields) % 2 == 0:
        fields = dict(zip(fields[::2], fields[1::2]))
    if not isinstance(fields, dict):
        return {}
    return {text(k) if isinstance(k, (bytes, str)) else str(k): text(v) if isinstance(v, (bytes, str)) else str(v)
            for k, v in fields.items()}


def _at_ms(cursor: str) -> int:
    ms = cursor.split("-", 1)[0]
    return int(ms) if ms.isascii() and ms.isdigit() and len(ms) <= 15 else 0


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return value


def cursor_after(since: Any) -> str:
    """The entry id a read starts after, from ``since``: None (from the
    oldest kept), an Event (after it), an entry id text "ms-seq" (after it)
    or "ms" (from that ms on), or a time in unix seconds (int or float:
    the events from then on). ValueError otherwise."""
    if since is None:
        return "0-0"
    if isinstance(since, Event):
        return since.cursor
    if isinstance(since, bool):
        raise ValueError("since: expected an event, its cursor or a time, not a boolean")
    if isinstance(since, (int, float)):
        if not since == since or since < 0 or since > 1e13:  # NaN, negative, past year 2286
            raise ValueError(f"since: expected unix seconds from 0, got {since!r}")
        ms = int(since * 1000)
        return f"{ms - 1}-{2**64 - 1}" if ms > 0 else "0-0"
    if isinstance(since, str) and _valid_cursor(since):
        if "-" in since:
            return since
        return f"{int(since) - 1}-{2**64 - 1}" if int(since) > 0 else "0-0"
    raise ValueError(f"since: expected an event, a cursor 'ms-seq' or unix seconds, got {since!r:.80}")


def _valid_cursor(value: str) -> bool:
    parts = value.split("-")
    return 1 <= len(parts) <= 2 and all(p.isascii() and p.isdigit() and 0 < len(p) <= 20 for p in parts) \
        and all(int(p) < 2**64 for p in parts)


def by_key(reply: Any) -> dict[str, Any]:
    """XREAD's reply as {key: entries}, whichever shape redis-py gives:
    [[key, entries]...] (RESP2, and redis-py 8 always), {key: entries}, or
    {key: [entries]} (RESP3 in redis-py 5 to 7)."""
    if not reply:
        return {}
    items = reply.items() if isinstance(reply, dict) else ((item[0], item[1]) for item in reply)
    found: dict[str, Any] = {}
    for key, entries in items:
        wrapped_once = isinstance(entries, list) and len(entries) == 1 and isinstance(entries[0], list)
        if wrapped_once and (not entries[0] or isinstance(entries[0][0], (list, tuple))):
            entries = entries[0]  # [[(id, fields)...]]: the list of entries, wrapped once
        found[text(key)] = entries
    return found


def merged(names: Sequence[str], keys: Callable[[str], QueueKeys], found: dict[str, Any],
           after: dict[str, str]) -> list[Event]:
    """The events XREAD ``found`` ({key: entries}) in the streams of
    ``names``, in cursor order; ``after`` moved past them."""
    events: list[Event] = []
    for name in names:
        for entry_id, fields in found.get(keys(name).events, ()):
            events.append(parse(name, entry_id, fields))
    for e in events:
        after[e.queue] = e.cursor
    return sorted(events, key=lambda e: sort_key(e.cursor))


def sort_key(cursor: str) -> tuple[int, int]:
    ms, _, seq = cursor.partition("-")
    return (int(ms) if ms.isdigit() else 0, int(seq) if seq.isdigit() else 0)


def read(keys: Callable[[str], QueueKeys], names: Sequence[str], after: dict[str, str], count: int,
         block_ms: int, separately: bool) -> Plan[list[Event]]:
    """The plan of Events.read(): up to ``count`` events of each of
    ``names`` after its cursor in ``after`` (missing: the oldest kept),
    merged in cursor order; ``after`` moves on past them. With ``block_ms``
    > 0 and none there, a second read waits up to that long (at most
    BLOCK_SLICE_MS) for one. ``separately``: one XREAD a stream (a Redis
    Cluster: their slots differ)."""
    block = min(max(0, block_ms), BLOCK_SLICE_MS)
    streams = {keys(n).events: after.get(n, "0-0") for n in names}
    found = yield from _xread(streams, count, None, separately)
    if not found and block:
        found = yield from _xread(streams, count, block, separately)
    return merged(names, keys, found, after)


def _xread(streams: dict[str, str], count: int, block: Optional[int], separately: bool) -> Plan[dict[str, Any]]:
    """XREAD of ``streams`` as {key: entries}: one command, or with
    ``separately`` one a stream, the blocking wait sliced among them,
    stopping at the first that has any."""
    if not separately or len(streams) == 1:
        return by_key(_reply((yield _xread_step(streams, count, block))))
    found: dict[str, Any] = {}
    each = None if block is None else max(1, block // len(streams))
    for key, cursor in streams.items():
        found.update(by_key(_reply((yield _xread_step({key: cursor}, count, each)))))
        if found and block is not None:
            break
    return found


def _xread_step(streams: dict[str, str], count: int, block: Optional[int]) -> list[Request]:
    waits = () if block is None else ("BLOCK", block)
    args = ("XREAD", "COUNT", count, *waits, "STREAMS", *streams, *streams.values())
    step: list[Request] = [Command(args, next(iter(streams)))]
    return step if block is None else Blocking(step)


def _reply(replies: list[Any]) -> Any:
    """A round trip's one reply, raised when it is an error."""
    if isinstance(replies[0], Exception):
        raise replies[0]
    return replies[0]


def newest(keys: Callable[[str], QueueKeys], names: Sequence[str],
           count: int) -> Plan[tuple[list[Event], dict[str, str]]]:
    """The plan of Events.newest(): the newest ``count`` events of
    ``names`` merged (oldest first), and each stream's newest entry id
    ("0-0": empty): where a reader of what comes next starts. One XREVRANGE
    a stream, in one round trip."""
    replies = yield [Command(("XREVRANGE", keys(n).events, "+", "-", "COUNT", max(1, count))) for n in names]
    found: list[Event] = []
    cursors: dict[str, str] = {}
    for name, reply in zip(names, replies):
        entries = _reply([reply])
        cursors[name] = text(entries[0][0]) if entries else "0-0"
        found.extend(parse(name, entry_id, fields) for entry_id, fields in reversed(entries))
    found.sort(key=lambda e: sort_key(e.cursor))
    return found[-count:] if count else [], cursors
