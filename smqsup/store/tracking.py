"""Tracked messages (result_ttl): their records read, an end waited for
without polling, progress written. The scripts that move a message write
its record (scripts/includes/track.lua has the schema); this reads it
through one schema, Record, so the writer and the readers cannot drift.

A wait subscribes to the message's channel, and only once Redis confirmed
the subscription reads the record: an end published after that read is
heard, one before it is read, so no end falls between the two. The waits
of one Broker share one subscription connection (waiters.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from smqsup.errors import BrokerConnectionError, BrokerError
from smqsup.store import scripts
from smqsup.store.connection import wrapped
from smqsup.store.link import Link, ms_of
from smqsup.store.waiters import Subscriber, Watch

#: The states a tracked message ends in: its record then lasts result_ttl.
ENDED = frozenset({"done", "dead", "cancelled"})
#: Every state a record may say (anything else in Redis reads as "unknown").
STATES = frozenset({"blocked", "scheduled", "waiting", "active", "retrying"}) | ENDED
#: Longest a wait blocks on its subscription at once, s (then it reads the record again).
_WAIT_SLICE_S = 5.0


@dataclass(frozen=True)
class Record:
    """What Redis holds on one tracked message. ``result`` and ``progress``
    are JSON text as written (None: none); ``meta`` the dead-letter
    metadata of one that died (reason, error...), else empty."""

    state: str
    attempts: int = 0
    at_ms: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    result: Optional[str] = None
    progress: Optional[str] = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def reason(self) -> str:
        reason = self.meta.get("reason")
        return reason if isinstance(reason, str) else ("cancelled" if self.state == "cancelled" else "unknown")


def _text(value: Any) -> Optional[str]:
    """Bytes Redis returned as text (None stays None; undecodable: None)."""
    if value is None:
        return None
    try:
        return bytes(value).decode("utf-8")
    except (UnicodeDecodeError, TypeError):
        return None


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def parse(raw: Any, result: Any, progress: Any, expires_ms: Any, now_ms: int) -> Optional[Record]:
    """The Record of replies HMGET (record, result, progress) and ZSCORE
    (its expiry) gave at ``now_ms``; None when there is none or its time has
    passed (removal is lazy). A record that is not what track.lua writes
    (garbage someone put there) reads as state "unknown", never an error."""
    if raw is None:
        return None
    try:
        if expires_ms is not None and float(expires_ms) <= now_ms:
            return None
    except (TypeError, ValueError):
        pass
    try:
        data = json.loads(_text(raw) or "")
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return Record("unknown")
    state, attempts, at_ms, meta = data.get("state"), data.get("attempts"), data.get("at_ms"), data.get("meta")
    return Record(state if state in STATES else "unknown",
                  attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
                  at_ms if isinstance(at_ms, int) and not isinstance(at_ms, bool) else 0,
                  meta if isinstance(meta, dict) else {}, _text(result), _text(progress))


def found_in(names: Sequence[str], replies: Sequence[Any], now_ms: int) -> Optional[tuple[str, Record]]:
    """The first of ``names`` (partitions) whose replies, HMGET (record,
    result, progress) and ZSCORE (its expiry) in pairs, hold a record at
    ``now_ms``, and that record; None when none does. A key of the wrong
    type (its reply an error) holds nothing readable."""
    for i, name in enumerate(names):
        fields, expires = replies[2 * i], replies[2 * i + 1]
        if isinstance(fields, Exception):
            continue
        raw, result, progress = fields
        record = parse(raw, result, progress, None if isinstance(expires, Exception) else expires, now_ms)
        if record is not None:
            return name, record
    return None


class Tracking:
    """Reads and waits of tracked messages; progress writes."""

    def __init__(self, link: Link) -> None:
        self._link = link
        # On a cluster a PUBLISH reaches every node: any node's connection hears them all.
        self._subscriber = Subscriber(lambda: link.client.pubsub())

    def find(self, names: Sequence[str], message_id: str) -> Optional[tuple[str, Record]]:
        """The partition (among ``names``, a queue's) holding the record of
        ``message_id``, and the record; None when none does (never
        tracked, or its result_ttl passed)."""
        link = self._link

        def ask(pipe: Any) -> None:
            for name in names:
                k = link.keys(name)
                pipe.hmget(k.tracked, [message_id, f"{message_id}:r", f"{message_id}:p"])
                pipe.zscore(k.tracked_expiry, message_id)
        with wrapped(f"read message {message_id!r} of {names[0]!r}"):
            now, replies = link.with_clock(ask, raise_on_error=False)
        return found_in(names, replies, ms_of(now))

    def wait(self, name: str, message_id: str, timeout_s: float) -> Optional[Record]:
        """The record of ``message_id`` in partition ``name`` once it ended,
        or as it is when ``timeout_s`` passed first; None once it is gone.
        Every wait of this Broker shares one subscription (waiters.py)."""
        deadline = time.monotonic() + timeout_s
        channel = self._link.keys(name).tracked_channel(message_id)
        while True:
            with wrapped(f"wait for message {message_id!r} of {name!r}"):
                w = self._subscriber.watch(channel)
            try:
                w.subscribed.wait(max(0.0, deadline - time.monotonic()))
                record = self._waited(w, name, message_id, deadline)
            finally:
                self._subscriber.unwatch(w)
            if w.refused is not None:
                with wrapped(f"wait for message {message_id!r} of {name!r} (SUBSCRIBE {channel})"):
                    raise w.refused
            if not w.lost or record is None or record.ended or time.monotonic() >= deadline:
                return record

    def _waited(self, w: Watch, name: str, message_id: str, deadline: float) -> Optional[Record]:
        """wait() once subscribed: read, then block until its end (or a progress) is
        published (at most _WAIT_SLICE_S at once) and read again; returns
        early when the subscription was lost."""
        while True:
            found = self.find([name], message_id)
            if found is None or found[1].ended:
                return None if found is None else found[1]
            left = deadline - time.monotonic()
            if left <= 0 or w.lost:
                return found[1]
            w.changed.wait(min(left, _WAIT_SLICE_S))
            w.changed.clear()

    def progresses(self, name: str, message_ids: Sequence[str]) -> dict[str, Any]:
        """The last progress (decoded JSON; text that is not JSON as it is)
        of each of ``message_ids`` in partition ``name`` that has one."""
        if not message_ids:
            return {}
        try:
            with wrapped(f"read the progress of messages of {name!r}"):
                raw = self._link.client.hmget(self._link.keys(name).tracked, [f"{mid}:p" for mid in message_ids])
        except BrokerError as exc:
            if isinstance(exc, BrokerConnectionError):
                raise
            return {}  # (a tracking hash someone filled with garbage: no progress to show)
        found = {mid: _text(value) for mid, value in zip(message_ids, raw) if value is not None}
        return {mid: _json_or_text(text) for mid, text in found.items() if text is not None}

    def cancels_asked(self, names: Sequence[str], message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` (held by a consumer of partitions
        ``names``) had their cancel asked (ZMSCORE of each cancel set)."""
        if not message_ids:
            return set()
        link = self._link
        batch = scripts.Batch(link.client)
        for name in names:
            batch.command("ZMSCORE", link.keys(name).cancel, *message_ids)
        with wrapped(f"read the cancels of {names[0]!r}"):
            replies = link.send(batch)
        return {mid for reply in replies if isinstance(reply, list)
                for mid, score in zip(message_ids, reply) if score is not None}

    def close(self) -> None:
        """Close the waits' shared subscription (a wait going on opens another)."""
        self._subscriber.close()

    def progress(self, name: str, message_id: str, value: str, *, tracked: bool = True, events_max: int = 0,
                 attempts: int = 0) -> bool:
        """Record ``value`` (JSON text) as the progress of message
        ``message_id`` in partition ``name``: in its record when ``tracked``
        (then whether it is still running, or waiting: a handler's retry
        reports too), and in the event stream when ``events_max`` (its
        head's, with its ``attempts``); whether it was recorded."""
        with wrapped(f"report the progress of message {message_id!r} of {name!r}"):
            return scripts.progress(self._link.keys(name), message_id, value, tracked=tracked,
                                    events_max=events_max, attempts=attempts).run(self._link.client)
