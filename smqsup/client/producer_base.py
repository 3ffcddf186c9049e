"""What the Producer and the AsyncProducer are, written once: their
arguments and settings (checked by Publishing), from_config, and the public
publish() and publish_many() signatures, which gather the options into one
PublishOptions and hand it to the producer's own sending, a call
(Producer) or a coroutine (AsyncProducer). One class, two drivers: the
subclass says how a store is opened and how a publish is sent.

    ProducerBase.publish(queue, body, **options) ─▶ PublishOptions
        ─▶ Producer._publish (sent now, the id)
         └ AsyncProducer._publish (a coroutine: awaited, the id)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Optional, TypeVar, cast

from smqsup import defaults, message
from smqsup.client import results
from smqsup.client.checks import valid_url
from smqsup.client.publish_options import PublishOptions
from smqsup.client.publishing import Publishing
from smqsup.store.core import plans

#: What publish() gives: the id (Producer), or an awaitable of it (AsyncProducer).
One = TypeVar("One")
#: What publish_many() gives: the ids, or an awaitable of them.
Many = TypeVar("Many")
#: What result() and progress() give: a value, or an awaitable of it.
Answer = TypeVar("Answer")
T = TypeVar("T")
P = TypeVar("P", bound="ProducerBase[Any, Any, Any]")


class ProducerBase(Generic[One, Many, Answer]):
    """Publishes JSON messages to queues (the Producer's docstring says
    what each option does and what each error means), and reads what
    became of them."""

    #: The store it sends through: a Broker, or an AsyncBroker (_open makes it).
    _broker: Any

    def __init__(self, url: str, namespace: str = defaults.NAMESPACE, *,
                 max_message_size: int = defaults.MAX_MESSAGE_SIZE_BYTES, stats: bool = True,
                 dedup_ttl: Any = defaults.DEDUP_TTL_S, dedup_ttls: Optional[Mapping[str, float]] = None,
                 wait_replicas: int = 0, wait_timeout: Any = defaults.WAIT_TIMEOUT_S,
                 hooks: Sequence[object] = (), tracing: bool = False) -> None:
        """``dedup_ttl``: how long a dedup key holds when a publish gives
        none; ``dedup_ttls``: the same per queue (from_config passes each
        queue's ``dedup_ttl``). ``wait_replicas``: a publish returns only
        once that many replicas of the master have its messages (WAIT),
        else raises PublishNotReplicated after ``wait_timeout`` seconds
        (the README says what each setting guarantees). ``hooks``: objects
        whose ``before_publish(queue, body, headers)`` runs, in order, on
        each message's own copy of its headers before it is encoded; one
        that raises refuses the whole call (HookFailed, nothing sent;
        client/publish_hooks.py). ``tracing``: a PRODUCER span "send QUEUE"
        around each publish, its traceparent in the messages' headers
        (smqsup/tracing.py; ConfigError without ``pip install 'smqsup[otel]'``).
        Every setting is checked here, with no I/O (MessageError or
        ConfigError for the first bad one)."""
        settings: dict[str, Any] = dict(max_message_size=max_message_size, stats=stats, dedup_ttl=dedup_ttl,
                                        dedup_ttls=dedup_ttls, wait_replicas=wait_replicas,
                                        wait_timeout=wait_timeout, hooks=hooks, tracing=tracing)
        core = self._core = Publishing(namespace, **settings)
        self.namespace = core.namespace
        self.dedup_ttl_s = core.dedup_ttl_s
        self.max_message_size = core.max_message_size
        self.id = core.id
        self._open(valid_url(url), namespace, settings)

    def _open(self, url: str, namespace: str, settings: dict[str, Any]) -> None:
        """Make the store it sends through (no I/O: it connects at its first use)."""
        raise NotImplementedError

    @property
    def published(self) -> int:
        """Messages this producer has published (the statistics read it)."""
        return self._core.published

    @classmethod
    def from_config(cls: type[P], path: "str | os.PathLike[str]", *, hooks: Sequence[object] = (),
                    tracing: Optional[bool] = None) -> P:
        """A producer using exactly the Redis and namespace that queues.yaml at
        ``path`` names (its embedded server must be running). Reads the file
        at once: call it at start-up, not in a busy loop."""
        from smqsup.config import model as config_mod
        from smqsup.launch.embedded import redis_url

        cfg = config_mod.load(path)
        return cls(redis_url(cfg), cfg.namespace, max_message_size=cfg.max_message_size_bytes, stats=cfg.stats,
                   dedup_ttls={name: q.dedup_ttl_s for name, q in cfg.queues.items()},
                   wait_replicas=cfg.redis.wait_replicas, wait_timeout=cfg.redis.wait_timeout_s, hooks=hooks,
                   tracing=any(q.tracing for q in cfg.queues.values()) if tracing is None else tracing)

    def publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]] = None, *,
                delay: Any = None, at: Any = None, priority: int = 0, dedup_key: Optional[str] = None,
                dedup_ttl: Any = None, ttl: Any = None, message_id: Optional[str] = None,
                partition_key: Optional[str] = None, result_ttl: Any = None, dedup_until: Optional[str] = None,
                depends_on: Optional[Sequence[tuple[str, str]]] = None, on_parent_failure: str = "fail",
                group: Optional[str] = None) -> One:
        """Queue one message in one round trip (with ``depends_on``, a few);
        its id (the AsyncProducer's: awaited). The options are the
        Producer's docstring's. Raises MessageError (bad queue name, not
        JSON, over max_message_size, a bad option, a parent not known)
        before anything is sent, PublishUncertain if the reply was lost."""
        return self._publish(queue, body, headers, PublishOptions(
            delay, at, priority, dedup_key, dedup_ttl, ttl, message_id, partition_key, result_ttl, dedup_until,
            group, depends_on, on_parent_failure))

    def _publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]], given: PublishOptions) -> One:
        raise NotImplementedError

    def publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]] = None, *,
                     delay: Any = None, at: Any = None, priority: int = 0,
                     dedup_key: "str | Sequence[Optional[str]] | None" = None, dedup_ttl: Any = None,
                     ttl: Any = None, partition_key: Optional[str] = None, result_ttl: Any = None,
                     dedup_until: Optional[str] = None, group: Optional[str] = None) -> Many:
        """Queue many messages in one round trip; their ids in order (the
        AsyncProducer's: awaited). Every body is encoded and checked before
        anything is sent; a lost reply raises PublishUncertain naming all
        of them.

        The options are publish()'s, applied to every message. ``dedup_key``
        is one key for all (so only the first message is queued, and every
        id returned is its id) or a sequence of keys, one per body (None:
        that body has none).

        On a queue with partitions, all go to one partition with a
        ``partition_key`` (its), a ``group`` (the group's) or one dedup key
        for all (the key's); with a sequence of dedup keys each message goes
        to its key's partition; otherwise they are spread over the
        partitions as evenly as they go (consecutive runs, from the next
        partition in turn). Each partition is one round trip, and an error
        names the messages of the partition that failed (the others' are
        queued)."""
        return self._publish_many(queue, bodies, headers, PublishOptions(
            delay, at, priority, dedup_key, dedup_ttl, ttl, None, partition_key, result_ttl, dedup_until, group))

    def _publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]],
                      given: PublishOptions) -> Many:
        raise NotImplementedError

    # --- after publish -----------------------------------------------------------

    def result(self, queue: str, message_id: str, timeout: Optional[float] = None) -> Answer:
        """What the handler of tracked message ``message_id`` returned,
        waiting (without polling: its end is published) up to ``timeout``
        seconds (None: for ever) for it to end; any number of waiters all
        get it. Raises MessageFailed (``.reason``, ``.attempts``) if it
        ended in the dead letters, TimeoutError if it has not ended in
        time, ResultUnknown if it was never tracked or its result_ttl passed."""
        wait_s = results.wait_s(timeout)
        return cast(Answer, self._then(self._record(queue, message_id, wait_s),
                                       lambda record: results.result_of(record, queue, message_id, timeout)))

    def state(self, queue: str, message_id: str) -> One:
        """scheduled, waiting, active, retrying, done, dead, cancelled, or
        unknown (never tracked, or past its result_ttl)."""
        return cast(One, self._then(self._record(queue, message_id), results.state_of))

    def progress(self, queue: str, message_id: str) -> Answer:
        """The last value its handler gave message.progress() (None: none
        yet); ResultUnknown as result() says."""
        return cast(Answer, self._then(self._record(queue, message_id),
                                       lambda record: results.progress_of(record, queue, message_id)))

    def cancel(self, queue: str, message_id: str) -> One:
        """Cancel a message, tracked or not; idempotent. Returns "cancelled"
        (it waited, was scheduled or waited to be retried: dead-lettered
        "cancelled" now), "stopping" (a consumer holds it: within a fraction
        of a second its task is cancelled, its thread told through
        message.cancelled, or its process replaced; it is dead-lettered
        "cancelled", never retried), the state a tracked message had already
        ended in ("done", "dead", "cancelled": nothing done), or "unknown"."""
        self._core.check_queue(queue)
        message.check_message_id(message_id)
        plan = plans.cancel_in(self._broker.keys, self._broker.names(queue), message_id)
        return cast(One, self._broker.tracking.run(plan, f"cancel message {message_id!r} of {queue!r}"))

    def _record(self, queue: str, message_id: str, wait_s: float = 0.0) -> Any:
        """The record of a tracked message (None when none is kept), waited
        for up to ``wait_s`` until final (the store's plans.record())."""
        self._core.check_queue(queue)
        message.check_message_id(message_id)
        plan = plans.record(self._broker.keys, self._broker.names(queue), message_id, wait_s)
        return self._broker.tracking.run(plan, f"read message {message_id!r} of {queue!r}")

    def _then(self, got: Any, answer: Callable[[Any], T]) -> Any:
        """``answer`` of what an operation ``got``: at once here (the
        Producer's); the AsyncProducer's awaits it first."""
        return answer(got)
