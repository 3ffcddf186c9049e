"""Where a reading of one queue's event stream is (Producer.events and
AsyncProducer.events share it): the cursor it started from and each
partition's cursor since. Partitions that appear while it follows are read
from its start (they are new: all their events are)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

from smqsup.errors import MessageError
from smqsup.store.broker import Broker
from smqsup.store.events import BLOCK_SLICE_MS, Event, cursor_after


class Reading:
    """A reading of a queue's events after ``since`` (events.cursor_after's
    forms, or "now": only what comes next). MessageError for a bad one."""

    def __init__(self, since: Any) -> None:
        self.now = isinstance(since, str) and since == "now"
        try:
            self.first: Optional[str] = None if self.now else cursor_after(since)
        except ValueError as exc:
            raise MessageError(str(exc)) from None
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


def read_on(broker: Broker, queue: str, reading: Reading, follow: bool,
            stopped: Callable[[], bool] = lambda: False) -> Iterator[Event]:
    """The events of ``queue`` after ``reading``'s cursors (Producer.events);
    with ``follow`` those that come next too, until ``stopped()`` says so
    (asked between reads, each of which waits at most BLOCK_SLICE_MS)."""
    events, block = broker.events, BLOCK_SLICE_MS if follow else 0
    while not stopped():
        names = broker.queues.partition_names(queue)
        fresh = reading.fresh(names)
        if fresh:  # the first read, or partitions added while following: all their events are new
            reading.start(fresh, events.last(fresh) if reading.needs_last() else None)
        got = events.read(names, reading.after, block_ms=block)
        yield from got
        if not got and not follow:
            return
