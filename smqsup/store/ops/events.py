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

from collections.abc import Sequence

from smqsup import defaults
from smqsup.store.core import event_entries
from smqsup.store.core.event_entries import Event
from smqsup.store.sync.session import Session


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
        when Redis fails or a stream is not a stream (event_entries.read())."""
        session = self._session
        plan = event_entries.read(session.keys, names, after, count, block_ms, session.router is not None)
        return session.run(plan, f"read the events of {names[0]!r}")

    def last(self, names: Sequence[str]) -> dict[str, str]:
        """Each stream's newest entry id now ("0-0" for an empty one): a
        follower that wants only what comes next starts there."""
        return self.newest(names, 1)[1]

    def newest(self, names: Sequence[str], count: int) -> tuple[list[Event], dict[str, str]]:
        """The newest ``count`` events of ``names`` merged (oldest first),
        and each stream's newest entry id ("0-0": empty): where a reader of
        what comes next starts (event_entries.newest())."""
        return self._session.run(event_entries.newest(self._session.keys, names, count),
                                 f"read the events of {names[0]!r}")
