"""Tracked messages (result_ttl): their records read, an end waited for
without polling, progress written, through the plans of core/plans.py
(where what is read, how a cancel is answered and when a wait stops are
decided once for both stores), which Session.run drives. The
scripts that move a message write its record (scripts/includes/track.lua
has the schema); it is read through one schema (records.py).

A wait subscribes to the message's channel, and only once Redis confirmed
the subscription reads the record: an end published after that read is
heard, one before it is read, so no end falls between the two. The waits
of one Broker share one subscription connection (sync/subscriber.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, TypeVar

from smqsup.errors import BrokerConnectionError, BrokerError
from smqsup.store import scripts
from smqsup.store.core import plans
from smqsup.store.core.failures import wrapped
from smqsup.store.core.records import ENDED, STATES, Record, found_in, json_or_text, parse, text_of
from smqsup.store.sync.session import Session
from smqsup.store.sync.subscriber import Subscriber

__all__ = ["ENDED", "STATES", "Record", "Tracking", "found_in", "parse"]

T = TypeVar("T")


class Tracking:
    """Reads and waits of tracked messages; progress writes."""

    def __init__(self, session: Session) -> None:
        self._session = session
        # On a cluster a PUBLISH reaches every node: any node's connection hears them all.
        self._subscriber = Subscriber(lambda: session.client.pubsub())

    def run(self, plan: "plans.WaitPlan[T]", what: str) -> T:
        """Session.run() of ``plan``, its subscription steps on the waits' shared subscription."""
        return self._session.run(plan, what, self._subscriber)

    def find(self, names: Sequence[str], message_id: str) -> Optional[tuple[str, Record]]:
        """The partition (among ``names``, a queue's) holding the record of
        ``message_id``, and the record; None when none does (never
        tracked, or its result_ttl passed). plans.find() decides."""
        return self._session.run(plans.find(self._session.keys, names, message_id),
                                 f"read message {message_id!r} of {names[0]!r}")

    def progresses(self, name: str, message_ids: Sequence[str]) -> dict[str, Any]:
        """The last progress (decoded JSON; text that is not JSON as it is)
        of each of ``message_ids`` in partition ``name`` that has one."""
        if not message_ids:
            return {}
        try:
            with wrapped(f"read the progress of messages of {name!r}"):
                raw = self._session.client.hmget(self._session.keys(name).tracked, [f"{mid}:p" for mid in message_ids])
        except BrokerError as exc:
            if isinstance(exc, BrokerConnectionError):
                raise
            return {}  # (a tracking hash someone filled with garbage: no progress to show)
        found = {mid: text_of(value) for mid, value in zip(message_ids, raw) if value is not None}
        return {mid: json_or_text(text) for mid, text in found.items() if text is not None}

    def cancels_asked(self, names: Sequence[str], message_ids: Sequence[str]) -> set[str]:
        """Which of ``message_ids`` (held by a consumer of partitions
        ``names``) had their cancel asked (ZMSCORE of each cancel set)."""
        if not message_ids:
            return set()
        session = self._session
        batch = scripts.Batch(session.client)
        for name in names:
            batch.command("ZMSCORE", session.keys(name).cancel, *message_ids)
        with wrapped(f"read the cancels of {names[0]!r}"):
            replies = session.send(batch)
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
            return scripts.progress(self._session.keys(name), message_id, value, tracked=tracked,
                                    events_max=events_max, attempts=attempts).run(self._session.client)
