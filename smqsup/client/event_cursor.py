"""Where a reading of one queue's event stream is (Producer.events and
AsyncProducer.events share it): the cursor it started from and each
partition's cursor since. Partitions that appear while it follows are read
from its start (they are new: all their events are)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

from smqsup.client import since as since_rule
from smqsup.errors import BrokerConnectionError, MessageError
from smqsup.store.broker import Broker
from smqsup.store.core.event_entries import BLOCK_SLICE_MS, Event, cursor_after


class Reading:
    """A reading of a queue's events after ``since`` (an Event, or what
    client/since.py reads: "now", a cursor, unix seconds, an ISO-8601
    time). MessageError for a bad one."""

    def __init__(self, since: Any) -> None:
        try:
            if isinstance(since, str):
                since = since_rule.parse(since)
            elif isinstance(since, (int, float)) and not isinstance(since, bool):
                since = since_rule.seconds(since)
            self.now = since == "now"
            self.first: Optional[str] = None if self.now else cursor_after(since)
        except ValueError as exc:
            text = str(exc)  # (cursor_after's name since already)
            raise MessageError(text if text.startswith("since") else f"since: {text}") from None
        #: partition -> the cursor its next read starts after.
        self.after: dict[str, str] = {}
        self._started = False

    def fresh(self, names: Sequence[str]) -> list[str]:
        """The partitions among ``names`` not read yet."""
        return [n for n in names if n not in self.after]

    def needs_last(self) -> bool:
        """Whether the partitions' newest ids are to be read before the first
        read (since "now"), and only then."""
        return self.now and not self._started

    def start(self, names: Sequence[str], last: Optional[dict[str, str]] = None) -> None:
        """Read ``names`` from the start, or from ``last`` (their newest ids)."""
        for name in names:
            self.after[name] = (last or {}).get(name) or self.first or "0-0"
        self._started = True


#: The longest wait between two tries of a follow that lost Redis, s (doubling from 0.1).
RECONNECT_MAX_S = 5.0


def read_on(broker: Broker, queue: str, reading: Reading, follow: bool,
            stopped: Callable[[], bool] = lambda: False,
            lost: Optional[Callable[[Optional[BrokerConnectionError]], None]] = None) -> Iterator[Event]:
    """The events of ``queue`` after ``reading``'s cursors (Producer.events);
    with ``follow`` those that come next too, until ``stopped()`` says so
    (asked between reads, each of which waits at most BLOCK_SLICE_MS).
    With ``follow`` and ``lost``, losing Redis (BrokerConnectionError: a
    restart, a dropped connection) does not end the reading: ``lost(error)``
    hears the first failure, the read is tried again (0.1 s, doubling to
    RECONNECT_MAX_S) and ``lost(None)`` hears the first that works; the
    cursors stay where they were, so nothing is shown twice or skipped
    (but what the stream lost meanwhile). Any other error ends it."""
    backoff_s = 0.0
    while not stopped():
        try:
            got = _read(broker, queue, reading, follow)
        except BrokerConnectionError as exc:
            if lost is None or not follow:
                raise
            if not backoff_s:
                lost(exc)
            backoff_s = min(RECONNECT_MAX_S, max(0.1, backoff_s * 2))
            _pause(backoff_s, stopped)
            continue
        if backoff_s and lost is not None:
            backoff_s = 0.0
            lost(None)
        yield from got
        if not got and not follow:
            return


def _read(broker: Broker, queue: str, reading: Reading, follow: bool) -> list[Event]:
    """One read of every partition of ``queue`` after ``reading``'s cursors."""
    events = broker.events
    names = broker.queues.partition_names(queue)
    fresh = reading.fresh(names)
    if fresh:  # the first read, or partitions added while following: all their events are new
        reading.start(fresh, events.last(fresh) if reading.needs_last() else None)
    return events.read(names, reading.after, block_ms=BLOCK_SLICE_MS if follow else 0)


def _pause(seconds: float, stopped: Callable[[], bool]) -> None:
    """Wait ``seconds``, or less once ``stopped()`` says so (asked every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while not stopped() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(0.1, left))
