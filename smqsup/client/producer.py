"""Publishing messages: the public Producer API.

    from smqsup import Producer
    producer = Producer("redis://127.0.0.1:6379/0")
    message_id = producer.publish("orders", {"order": 42})
    producer.publish("orders", {"order": 43}, delay=30, priority=9, dedup_key="order-43", ttl=600)
    mid = producer.publish("resize", {"image": 7}, result_ttl=3600)
    producer.result("resize", mid, timeout=30)   # what the handler returned
    producer.cancel("resize", mid)               # "cancelled", "stopping", "done"...

A publish without options is one LPUSH script (publish.lua); one with any
option goes through publish_options.lua (options.py checks them). The checks,
envelopes, partition choice and errors are publishing.py's, shared with the
AsyncProducer (aio.py); this module sends what it prepares through the Broker.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional

from smqsup import defaults, message
from smqsup.client import dependencies, results
from smqsup.client.events import Reading, read_on
from smqsup.client.publishing import Outgoing, Publishing, Sending, log, valid_url
from smqsup.errors import BrokerError, MessageError
from smqsup.store.broker import Broker
from smqsup.store.events import Event
from smqsup.store.queues import Declared
from smqsup.store.tracking import Record
from smqsup.store.workflows import DEDUPLICATED, IN_USE


class Producer:
    """Publishes JSON messages to queues. Not for sharing across fork: make
    one per process (or call it again in the child).

    Neither method retries on its own. When Redis cannot be reached they raise
    PublishNotSent (nothing queued: safe to publish again); when the request
    went out but its reply was lost, PublishUncertain, naming the ids that
    may or may not be queued, so a caller who publishes again knows it may
    create a duplicate. Both derive from BrokerConnectionError.
    """

    def __init__(self, url: str, namespace: str = defaults.NAMESPACE, *,
                 max_message_size: int = defaults.MAX_MESSAGE_SIZE_BYTES, stats: bool = True,
                 dedup_ttl: Any = defaults.DEDUP_TTL_S, dedup_ttls: Optional[Mapping[str, float]] = None,
                 wait_replicas: int = 0, wait_timeout: Any = defaults.WAIT_TIMEOUT_S) -> None:
        """``dedup_ttl``: how long a dedup key holds when a publish gives
        none; ``dedup_ttls``: the same per queue (from_config passes each
        queue's ``dedup_ttl``). ``wait_replicas``: a publish returns only
        once that many replicas of the master have its messages (WAIT),
        else raises PublishNotReplicated after ``wait_timeout`` seconds
        (the README says what each setting guarantees)."""
        core = self._core = Publishing(namespace, max_message_size=max_message_size, stats=stats,
                                       dedup_ttl=dedup_ttl, dedup_ttls=dedup_ttls, wait_replicas=wait_replicas,
                                       wait_timeout=wait_timeout)
        self.namespace = core.namespace
        self.dedup_ttl_s = core.dedup_ttl_s
        self.max_message_size = core.max_message_size
        self.id = core.id
        self._broker = Broker(valid_url(url), namespace, client_name=f"smqsup-producer-{os.getpid()}", stats=stats,
                              wait_replicas=core.wait_replicas, wait_timeout_s=core.wait_timeout_s)

    @property
    def published(self) -> int:
        """Messages this producer has published (the statistics read it)."""
        return self._core.published

    @property
    def _writers(self) -> dict[str, message.EnvelopeWriter]:
        return self._core.writers

    @classmethod
    def from_config(cls, path: "str | os.PathLike[str]") -> "Producer":
        """A producer using exactly the Redis and namespace that queues.yaml at
        ``path`` names (its embedded server must be running)."""
        from smqsup.config import model as config_mod
        from smqsup.store.embedded import redis_url

        cfg = config_mod.load(path)
        return cls(redis_url(cfg), cfg.namespace, max_message_size=cfg.max_message_size_bytes, stats=cfg.stats,
                   dedup_ttls={name: q.dedup_ttl_s for name, q in cfg.queues.items()},
                   wait_replicas=cfg.redis.wait_replicas, wait_timeout=cfg.redis.wait_timeout_s)

    def publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]] = None, *,
                delay: Any = None, at: Any = None, priority: int = 0, dedup_key: Optional[str] = None,
                dedup_ttl: Any = None, ttl: Any = None, message_id: Optional[str] = None,
                partition_key: Optional[str] = None, result_ttl: Any = None,
                depends_on: Optional[Sequence[tuple[str, str]]] = None, on_parent_failure: str = "fail") -> str:
        """Queue one message in one round trip; return its id.

        ``delay`` (seconds or a timedelta, from when Redis receives it) or
        ``at`` (an aware datetime or epoch seconds, by the Redis clock): not
        handed to a consumer before then. ``priority`` 0-9: consumers take
        the highest ready priority first, FIFO within one. ``dedup_key``:
        while a message published with the same key on this queue less than
        ``dedup_ttl`` ago holds it, nothing is queued and that message's id
        is returned (so publishing again after PublishUncertain is safe).
        ``ttl``: not handed to a handler within ttl of its publish, it is
        dead-lettered as "expired". ``partition_key``: on a queue with
        partitions, messages with the same key go to the same partition, so
        they keep their order (a message with a dedup key and no partition
        key goes by its dedup key; the others round-robin). ``result_ttl``
        (seconds; None: the queue's ``result_ttl`` option, as its consumers
        declared it; 0: not tracked): its state, progress and outcome are
        kept until that long after it ended (result(), state(), progress()).

        ``depends_on``: (queue, id) pairs of tracked messages it waits for:
        held ("blocked") until each is done, then queued (``delay`` and
        ``ttl`` from then; no ``at``), its handler reads their results as
        ``message.parents``; dead-lettered "dependency failed: QUEUE/ID
        (reason)" when one fails, unless ``on_parent_failure="run"``.

        Raises MessageError (bad queue name, not JSON, over max_message_size,
        a bad option, a parent not known) before anything is sent,
        PublishUncertain if the reply was lost.
        """
        count, said = self._declared(queue)
        out = self._core.one(queue, body, headers, delay=delay, at=at, priority=priority, dedup_key=dedup_key,
                             dedup_ttl=dedup_ttl, ttl=ttl, message_id=message_id, partition_key=partition_key,
                             result_ttl=result_ttl, declared=said)
        if depends_on is not None:
            return self._held(out, count, depends_on, on_parent_failure)
        return self._deliver(out, count)[0]

    def chain(self, steps: Sequence[Any]) -> list[str]:
        """Publish ``steps``, each (queue, body) or (queue, body, {options})
        with publish()'s keywords, so that each waits for the one before
        (depends_on) and reads its result (message.parents); their ids, in
        order. Every step but the last is tracked: its ``result_ttl``, else
        its queue's, else CHAIN_RESULT_TTL_S. A step whose parent failed is
        dead-lettered, and with it each after it, but one with
        ``on_parent_failure="run"``. Every step is checked before the
        first is sent (MessageError)."""
        plan = dependencies.steps(steps)
        for i, (queue, body, opts) in enumerate(plan):
            if i < len(plan) - 1 and opts.get("result_ttl") is None:
                opts["result_ttl"] = self._declared(queue)[1].result_ttl_s or defaults.CHAIN_RESULT_TTL_S
            if i < len(plan) - 1 and opts["result_ttl"] == 0:
                raise MessageError(f"chain[{i}]: result_ttl 0, but the next step reads its result")
            rule = opts.pop("on_parent_failure", "fail")
            dependencies.failure_rule(rule)
            self._core.one(queue, body, opts.pop("headers", None), **{"delay": None, "at": None, "priority": 0,
                           "dedup_key": None, "dedup_ttl": None, "ttl": None, "message_id": None,
                           "partition_key": None, **opts})
            opts["on_parent_failure"] = rule
        ids: list[str] = []
        for i, (queue, body, opts) in enumerate(plan):
            after: dict[str, Any] = {"depends_on": [(plan[i - 1][0], ids[-1])]} if i else {}
            if not i:
                opts.pop("on_parent_failure")
            ids.append(self.publish(queue, body, **opts, **after))
        return ids

    def _held(self, out: Outgoing, count: "int | BrokerError", depends_on: object, on_parent_failure: object) -> str:
        """publish() of a message with ``depends_on`` (store/workflows.py)."""
        wanted, run = dependencies.parents(depends_on), dependencies.failure_rule(on_parent_failure)
        core, flows = self._core, self._broker.workflows
        mid, kept, key, dedup_ttl_ms = dependencies.kept(out, run)
        if (out.queue, mid) in wanted:
            raise MessageError(f"depends_on: message {mid} of queue {out.queue} cannot depend on itself")
        if isinstance(count, BrokerError):
            count = core.uncounted(out.queue, out.ids, count)
        target = core.route(out, count)[0][0]
        try:
            found = flows.locate(wanted)
            waits = [(found[p] or "", p[1]) for p in dependencies.known(wanted, found)]
            status, holder, mark = flows.hold(target, mid, kept, waits, key, dedup_ttl_ms)
        except BrokerError as exc:
            raise dependencies.publish_error(exc, mid) from exc
        if status == IN_USE:
            raise MessageError(f"message_id {mid}: in use in queue {out.queue} (a message held or tracked there "
                               "has it); nothing was published")
        if status == DEDUPLICATED:
            return holder
        core.published += 1
        try:
            flows.register(target, mid, waits, mark)
        except BrokerError as exc:
            log.warning("queue %s: message %s is held, but telling its parents failed (%s); the queue's collector "
                        "does it within %.0f s", out.queue, mid, exc, defaults.HOLD_REPAIR_S)
        return mid

    def publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]] = None, *,
                     delay: Any = None, at: Any = None, priority: int = 0,
                     dedup_key: "str | Sequence[Optional[str]] | None" = None, dedup_ttl: Any = None,
                     ttl: Any = None, partition_key: Optional[str] = None, result_ttl: Any = None) -> list[str]:
        """Queue many messages in one round trip; return their ids in order.
        Every body is encoded and checked before anything is sent; a lost
        reply raises PublishUncertain naming all of them.

        The options are publish()'s, applied to every message. ``dedup_key``
        is one key for all (so only the first message is queued, and every
        id returned is its id) or a sequence of keys, one per body (None:
        that body has none).

        On a queue with partitions, all go to one partition (``partition_key``'s,
        or the next in turn), but for a sequence of dedup keys without a
        partition key: each message then goes to its key's partition, one
        round trip per partition, and an error names the messages of the
        partition that failed (those sent before it are queued)."""
        count, said = self._declared(queue)
        return self._deliver(self._core.many(queue, bodies, headers, delay=delay, at=at, priority=priority,
                                             dedup_key=dedup_key, dedup_ttl=dedup_ttl, ttl=ttl,
                                             partition_key=partition_key, result_ttl=result_ttl,
                                             declared=said), count)

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

    def result(self, queue: str, message_id: str, timeout: Optional[float] = None) -> Any:
        """What the handler of tracked message ``message_id`` returned,
        waiting (without polling: its end is published) up to ``timeout``
        seconds (None: for ever) for it to end; any number of waiters all
        get it. Raises MessageFailed (``.reason``, ``.attempts``) if it
        ended in the dead letters, TimeoutError if it has not ended in
        time, ResultUnknown if it was never tracked or its result_ttl passed."""
        wait_s = results.wait_s(timeout)
        found = self._find(queue, message_id)
        record = None if found is None else found[1]
        if found is not None and not record.ended and wait_s > 0:  # type: ignore[union-attr]
            record = self._broker.tracking.wait(found[0], message_id, wait_s)
        return results.result_of(record, queue, message_id, timeout)

    def state(self, queue: str, message_id: str) -> str:
        """scheduled, waiting, active, retrying, done, dead, cancelled, or
        unknown (never tracked, or past its result_ttl)."""
        return results.state_of(self._record(queue, message_id))

    def progress(self, queue: str, message_id: str) -> Any:
        """The last value its handler gave message.progress() (None: none
        yet); ResultUnknown as result() says."""
        return results.progress_of(self._record(queue, message_id), queue, message_id)

    def cancel(self, queue: str, message_id: str) -> str:
        """Cancel a message, tracked or not; idempotent. Returns "cancelled"
        (it waited, was scheduled or waited to be retried: dead-lettered
        "cancelled" now), "stopping" (a consumer holds it: within a fraction
        of a second its task is cancelled, its thread told through
        message.cancelled, or its process replaced; it is dead-lettered
        "cancelled", never retried), the state a tracked message had already
        ended in ("done", "dead", "cancelled": nothing done), or "unknown"."""
        self._core.check_queue(queue)
        message.check_message_id(message_id)
        return self._broker.contents.cancel(self._broker.queues.partition_names(queue), message_id)

    def _record(self, queue: str, message_id: str) -> Optional[Record]:
        found = self._find(queue, message_id)
        return None if found is None else found[1]

    def _find(self, queue: str, message_id: str) -> Optional[tuple[str, Record]]:
        """(partition, record) of a tracked message; None when none holds one."""
        self._core.check_queue(queue)
        message.check_message_id(message_id)
        return self._broker.tracking.find(self._broker.queues.partition_names(queue), message_id)

    def _deliver(self, out: Outgoing, count: "int | BrokerError") -> list[str]:
        """Send ``out`` to its partitions (one round trip each, in turn), of
        which there are ``count`` (or the error reading it); the ids, as
        publishing.Publishing.merged says."""
        core = self._core
        if isinstance(count, BrokerError):
            count = core.uncounted(out.queue, out.ids, count)
        groups = core.route(out, count)
        if len(groups) == 1:  # one round trip for them all: its error is the caller's (the usual case)
            return self._send(core.sending(out, *groups[0]))
        results: list[list[str] | BrokerError] = []
        for target, where in groups:
            try:
                results.append(self._send(core.sending(out, target, where)))
            except BrokerError as exc:  # the other partitions' messages are still sent
                if len(groups) == 1:
                    raise
                results.append(exc)
        return core.merged(out, groups, results)

    def _send(self, s: Sending) -> list[str]:
        """Publish the plain frames, or the items with options, of round trip
        ``s``; the ids (a deduplicated message's is the id holding its key)."""
        pairs: list[tuple[str, bool]] = []
        try:
            if s.options is None:
                self._broker.messages.push(s.target, s.frames, register=s.register,  # type: ignore[arg-type]
                                           producer=s.stats)
            else:
                pairs = self._broker.messages.push_with(s.target, s.frames, s.options,  # type: ignore[arg-type]
                                                        register=s.register, producer=s.stats)
        except BrokerError as exc:
            self._core.failed(s, exc)
            raise
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
            try:
                self._broker.messages.producer_stats(self.id, info)
            except BrokerError as exc:
                self._core.not_flushed(exc)
        self._broker.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        """Close; an exception already in flight (PublishRefused...) is the
        one the caller sees, never one from closing."""
        try:
            self.close()
        except Exception:
            if exc is None:
                raise
            log.debug("producer %s: closing after %s failed too", self.id, exc_type, exc_info=True)
