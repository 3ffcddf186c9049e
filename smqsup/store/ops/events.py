"""Queues' event streams read: what each message of a queue with events
on went through (published, started, progress, retried, done, dead,
expired, cancelled, removed, reclaimed, returned, requeued), one Event per
entry. The scripts that move a message write them (scripts/includes/
track.lua has the schema), in the same step as the move.

A queue with partitions has a stream per partition: one message's events
are all in its partition's stream, in order; the partitions' are merged by
their entry ids (Redis time, ms), which orders them as they happened on one
server (on a Redis Cluster, as each shard's clock says).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from smqsup import defaults, safe
from smqsup.keys import QueueKeys
from smqsup.store.sync.connection import wrapped
from smqsup.store.sync.session import Session, text

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
    """An entry's fields as texts (redis-py gives a dict; anything else: none)."""
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


class Events:
    """The event streams of a Broker's queues (``names``: a queue's
    partitions, Queues.partition_names)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def read(self, names: Sequence[str], after: dict[str, str], count: int = defaults.EVENTS_READ_COUNT,
             block_ms: int = 0) -> list[Event]:
        """Up to ``count`` events of each of ``names`` after its cursor in
        ``after`` (missing: the oldest kept), merged in cursor order;
        ``after`` moves on past them. With ``block_ms`` > 0 and none there,
        waits up to that long (at most BLOCK_SLICE_MS) for one. BrokerError
        when Redis fails or a stream is not a stream."""
        block = min(max(0, block_ms), BLOCK_SLICE_MS)
        streams = {self._session.keys(n).events: after.get(n, "0-0") for n in names}
        with wrapped(f"read the events of {names[0]!r}"):
            found = self._xread(streams, count, None)
            if not found and block:
                found = self._xread(streams, count, block)
        return merged(names, self._session.keys, found, after)

    def last(self, names: Sequence[str]) -> dict[str, str]:
        """Each stream's newest entry id now ("0-0" for an empty one): a
        follower that wants only what comes next starts there."""
        return self.newest(names, 1)[1]

    def newest(self, names: Sequence[str], count: int) -> tuple[list[Event], dict[str, str]]:
        """The newest ``count`` events of ``names`` merged (oldest first),
        and each stream's newest entry id ("0-0": empty): where a reader of
        what comes next starts. One XREVRANGE a stream."""
        found: list[Event] = []
        cursors: dict[str, str] = {}
        with wrapped(f"read the events of {names[0]!r}"):
            for name in names:
                entries = self._session.client.xrevrange(self._session.keys(name).events, count=max(1, count))
                cursors[name] = text(entries[0][0]) if entries else "0-0"
                found.extend(parse(name, entry_id, fields) for entry_id, fields in reversed(entries))
        found.sort(key=lambda e: sort_key(e.cursor))
        return found[-count:] if count else [], cursors

    def _xread(self, streams: dict[str, str], count: int, block: Optional[int]) -> dict[str, Any]:
        """XREAD of ``streams`` as {key: entries}: one call on one server; on
        a Redis Cluster one per stream (their slots differ), the blocking
        wait on the first only, sliced among them."""
        client = self._session.client
        if self._session.router is None or len(streams) == 1:
            return by_key(client.xread(streams, count=count, block=block))
        found: dict[str, Any] = {}
        each = None if block is None else max(1, block // len(streams))
        for key, cursor in streams.items():
            found.update(by_key(client.xread({key: cursor}, count=count, block=each)))
            if found and block is not None:
                break
        return found


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
