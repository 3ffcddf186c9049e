"""Publishing messages: the public Producer API.

    from smqsup import Producer
    producer = Producer.from_config("queues.yaml")   # or Producer(os.environ["REDIS_URL"])
    message_id = producer.publish("orders", {"order": 42})
    producer.publish("orders", {"order": 43}, delay=30, priority=9, dedup_key="order-43", ttl=600)
    mid = producer.publish("resize", {"image": 7}, result_ttl=3600)
    producer.result("resize", mid, timeout=30)   # what the handler returned
    producer.cancel("resize", mid)               # "cancelled", "stopping", "done"...

A publish without options is one LPUSH script (publish.lua); one with any
option goes through publish_options.lua (options.py checks them). The checks,
envelopes, partition choice and errors are publishing.py's, shared with the
AsyncProducer (aio_producer.py); this module sends what it prepares through the Broker.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional

from smqsup import message
from smqsup.client import batching, flows
from smqsup.client.event_cursor import Reading, read_on
from smqsup.client.outgoing import Outgoing, Sending
from smqsup.client.producer_base import ProducerBase
from smqsup.client.publish_options import PublishOptions
from smqsup.errors import BrokerError, MessageError
from smqsup.store.broker import Broker
from smqsup.store.core.declared import Declared
from smqsup.store.core.event_entries import Event
from smqsup.store.ops.batches import BatchStatus, parse_id


class Producer(ProducerBase[str, list[str], Any]):
    """Publishes JSON messages to queues. Not for sharing across fork: make
    one per process (or call it again in the child).

    The options of publish() (and publish_many(), each message):

    ``delay`` (seconds or a timedelta, from when Redis receives it) or
    ``at`` (an aware datetime or epoch seconds, by the Redis clock): not
    handed to a consumer before then. ``priority`` 0-9: consumers take the
    highest ready priority first, FIFO within one. ``dedup_key``: while a
    message published with the same key on this queue less than
    ``dedup_ttl`` ago holds it, nothing is queued and that message's id is
    returned (so publishing again after PublishUncertain is safe); with
    ``dedup_until="done"`` the key holds until that message ends (done or
    dead, however long that takes, retries and reclaims included), with
    ``"start"`` until it starts. ``ttl``: not handed to a handler within ttl
    of its publish, it is dead-lettered as "expired". ``partition_key``: on
    a queue with partitions, messages with the same key go to the same
    partition, so they keep their order (a message with a dedup key and no
    partition key goes by its dedup key; the others round-robin). On such a
    queue a dedup key holds within the partition its message goes to: with a
    group or partition key of another partition the same key queues again.
    ``group`` (a str of 1 to 256 bytes of UTF-8, no control characters): the
    message's group (a tenant, a customer, an API key): the queue's
    consumers take from its groups in turn, one message per group per turn,
    so a group with 100,000 waiting delays one with 10 by at most one
    message per turn; its options ``group_concurrency`` and
    ``group_rate_limit`` bound each group. On a queue with partitions a
    group lives in the partition its name picks (not with ``partition_key``).
    ``result_ttl`` (seconds; None: the queue's ``result_ttl`` option, as its
    consumers declared it; 0: not tracked): its state, progress and outcome
    are kept until that long after it ended (result(), state(), progress()).
    ``depends_on`` (publish() only): (queue, id) pairs of tracked messages
    it waits for: held ("blocked") until each is done, then queued
    (``delay`` and ``ttl`` from then; no ``at``), its handler reads their
    results as ``message.parents``; dead-lettered "dependency failed:
    QUEUE/ID (reason)" when one fails, unless ``on_parent_failure="run"``.

    Neither method retries on its own. When Redis cannot be reached they raise
    PublishNotSent (nothing queued: safe to publish again); when the request
    went out but its reply was lost, PublishUncertain, naming the ids that
    may or may not be queued, so a caller who publishes again knows it may
    create a duplicate. Both derive from BrokerConnectionError.
    """

    _broker: Broker

    def _open(self, url: str, namespace: str, settings: dict[str, Any]) -> None:
        core = self._core
        self._broker = Broker(url, namespace, client_name=f"smqsup-producer-{os.getpid()}", stats=core.stats,
                              wait_replicas=core.wait_replicas, wait_timeout_s=core.wait_timeout_s)

    @property
    def _writers(self) -> dict[str, message.EnvelopeWriter]:
        return self._core.writers

    def _publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]], given: PublishOptions) -> str:
        with self._core.send_span(queue) as send:
            headers = send.headers(headers, given.depends_on)  # (tracing on: its traceparent; a child's, its parents')
            count, said = self._declared(queue)
            out = self._core.one(queue, body, headers, given, said)
            mid = flows.held(self, out, count, given.depends_on, given.on_parent_failure) \
                if given.depends_on is not None else self._deliver(out, count)[0]
            send.done([mid])
        return mid

    def chain(self, steps: Sequence[Any]) -> list[str]:
        """Publish ``steps``, each (queue, body) or (queue, body, {options})
        with publish()'s keywords, so that each waits for the one before
        (depends_on) and reads its result (message.parents); their ids, in
        order (client/flows.py)."""
        return flows.chain(self, steps)

    def batch(self, on_complete: Optional[tuple[str, Any]] = None,
              on_success: Optional[tuple[str, Any]] = None) -> batching.Batch:
        """A new batch (client/batching.py): once it is closed and every one
        of its messages ended, one message goes to ``on_complete`` (queue,
        body), and one to ``on_success`` when none failed, exactly once;
        their body: {"batch", "body" (the given one), "done", "failed",
        "failures" (the first 100: {"id", "queue", "reason"})}. At least
        one callback (MessageError)."""
        return flows.open_batch(self, on_complete, on_success)

    def batch_status(self, batch_id: str) -> Optional[BatchStatus]:
        """What Redis holds on batch ``batch_id`` (Batch.id): its counts,
        whether it is closed and fired, its first failures; None when
        unknown (or a day after it fired)."""
        where = parse_id(batch_id) if isinstance(batch_id, str) else None
        if where is None:
            raise MessageError(f"batch_id: expected an id Batch.id gave, got {str(batch_id)[:80]!r}")
        return self._broker.batches.status(*where)

    def publish_members(self, batch: batching.Batch, queue: str, bodies: Iterable[Any],
                        headers: Optional[Mapping[str, Any]], options: dict[str, Any], *, many: bool) -> list[str]:
        """Batch.publish / publish_many (client/flows.py)."""
        return flows.members(self, batch, queue, bodies, headers, options, many=many)

    def close_batch(self, batch: batching.Batch) -> bool:
        """Batch.close: whether its callbacks were published now."""
        return self._broker.batches.close(batch.home, batch.batch_id)

    def _publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]],
                      given: PublishOptions) -> list[str]:
        with self._core.send_span(queue) as send:
            headers = send.headers(headers)  # (tracing on: its traceparent, in every message's headers)
            count, said = self._declared(queue)
            ids = self._deliver(self._core.many(queue, bodies, headers, given, said), count)
            send.done(ids, many=True)
        return ids

    def _declared(self, queue: str) -> "tuple[int | BrokerError, Declared]":
        """What ``queue``'s consumers declared, read together and cached: its
        partition count (or the error reading it, which the publish turns
        into its own once the messages are checked) and the options
        producers apply (each 0 when unreadable)."""
        self._core.check_queue(queue)
        return self._broker.queues.declared(queue)

    # --- after publish -----------------------------------------------------------

    def events(self, queue: str, since: Any = None, *, follow: bool = False) -> Iterator[Event]:
        """The events of ``queue`` (its option ``events: true``), oldest
        first: from the oldest its stream keeps, or after ``since`` (an
        Event, its ``cursor``, unix seconds, or "now"). Without ``follow`` the
        iterator ends when none is left; with it, it waits for more for ever
        (break out of the loop to stop). MessageError for a bad argument,
        BrokerError when Redis fails; garbage in a stream is an Event
        "malformed"."""
        self._core.check_queue(queue)
        return read_on(self._broker, queue, Reading(since), follow)

    def _deliver(self, out: Outgoing, count: "int | BrokerError") -> list[str]:
        """Send ``out`` to its partitions (one round trip each, in turn), of
        which there are ``count`` (or the error reading it); the ids, as
        publishing.Publishing.merged says."""
        sendings = self._core.sendings(out, count)
        if len(sendings) == 1:  # one round trip for them all: its error is the caller's (the usual case)
            return self._send(sendings[0])
        return self._core.merged(out, sendings, [self._attempt(s) for s in sendings])

    def _attempt(self, s: Sending) -> "list[str] | BrokerError":
        """_send(), its store error returned: the other partitions' messages are still sent."""
        try:
            return self._send(s)
        except BrokerError as exc:
            return exc

    def _send(self, s: Sending) -> list[str]:
        """Publish the plain frames, or the items with options, of round trip
        ``s``; the ids (a deduplicated message's is the id holding its key)."""
        with self._core.sending_of(s):
            pairs = self._broker.messages.publish(s.target, s.frames, s.options, register=s.register,
                                                  producer=s.stats)
        return self._core.sent(s, pairs)

    def close(self) -> None:
        """Flush the statistics (best effort) and close the connection.

        Never raises for the flush: the messages are queued whatever happens to
        their statistics, so Redis refusing them (OOM under noeviction, an ACL
        NOPERM) or a lost connection is logged (a refusal as a warning once
        per process), never raised.
        """
        info = self._core.closing_stats()
        if info is not None:
            with self._core.flushing():
                self._broker.messages.producer_stats(self.id, info)
        self._broker.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        """Close; an exception already in flight (PublishRefused...) is the
        one the caller sees, never one from closing."""
        with self._core.closing_after(exc):
            self.close()
