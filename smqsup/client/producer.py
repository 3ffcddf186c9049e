"""Publishing messages: the public Producer API.

    from smqsup import Producer
    producer = Producer("redis://127.0.0.1:6379/0")
    message_id = producer.publish("orders", {"order": 42})
    producer.publish("orders", {"order": 43}, delay=30, priority=9, dedup_key="order-43", ttl=600)

A publish without options is one LPUSH script (publish.lua); one with any
option goes through publish_options.lua (options.py checks them).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional, cast

from smqsup import defaults, message, safe
from smqsup.client import options
from smqsup.config import scalars
from smqsup.config.names import validate_queue_name
from smqsup.config.scalars import REDIS_STRING_MAX_BYTES
from smqsup.errors import (
    BrokerConnectionError,
    BrokerError,
    BrokerNotSent,
    ConfigError,
    MessageError,
    NotReplicated,
    PublishNotReplicated,
    PublishNotSent,
    PublishRefused,
    PublishUncertain,
    PushRefused,
)
from smqsup.ids import new_id, new_ids
from smqsup.keys import partition_name
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.broker import Broker

log = logging.getLogger(__name__)

#: Queues whose single-publish envelope writers a producer keeps at once (then forgets them all).
_WRITERS_KEPT = 1024


def _valid_name(name: object, what: str) -> str:
    """``name`` if it is a valid queue name or namespace; MessageError (one
    bounded line) for anything else, whatever its type."""
    if not isinstance(name, str):
        raise MessageError(f"{what}: expected a name string, got a value of type {type(name).__name__}")
    try:
        return validate_queue_name(name)
    except ConfigError as exc:
        raise MessageError(f"{what} {safe.escape(repr(name), 80)}: {str(exc).split(': ', 1)[-1]}") from None


def _valid_url(url: object) -> str:
    """``url`` if it is a string (connect() checks the rest); ConfigError otherwise."""
    if not isinstance(url, str):
        raise ConfigError(f"redis.url: expected a url string, got a value of type {type(url).__name__}")
    return url


def _valid_max_size(size: object) -> int:
    """``size`` if it is a whole number of bytes Redis can hold; ConfigError otherwise."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= REDIS_STRING_MAX_BYTES:
        shown = safe.escape(size, 40) if isinstance(size, (int, float, str)) else f"a value of type {type(size).__name__}"
        raise ConfigError(f"max_message_size: expected bytes from 1 to {REDIS_STRING_MAX_BYTES}, got {shown}")
    return size


def _materialise(queue: str, bodies: object) -> list[Any]:
    """The bodies of a publish_many as a list, read before anything is sent;
    MessageError when they are not an iterable of bodies, or when reading
    them raised (then nothing was sent: the error says so)."""
    if isinstance(bodies, (str, bytes, bytearray, Mapping)) or not isinstance(bodies, Iterable):
        raise MessageError(f"queue {queue!r}: bodies must be an iterable of message bodies, "
                           f"not a {type(bodies).__name__} (wrap one body in a list)")
    try:
        return list(bodies)
    except Exception as exc:  # noqa: BLE001 - the caller's iterator failed: say that nothing was sent
        raise MessageError(f"queue {queue!r}: reading the bodies raised {type(exc).__name__}: "
                           f"{safe.escape(exc, 200)}; nothing was sent") from exc


def _dedup_keys(dedup_key: object, count: int) -> list[Optional[str]]:
    """publish_many's dedup keys, one per body: one key for all, or a
    sequence of keys (None: none) as long as the bodies."""
    if dedup_key is None or isinstance(dedup_key, str):
        return [None if dedup_key is None else options.dedup_key(dedup_key)] * count
    if not isinstance(dedup_key, Sequence) or isinstance(dedup_key, (bytes, bytearray)):
        raise MessageError(f"dedup_key: expected a string or a sequence of strings (one per body), "
                           f"got a value of type {type(dedup_key).__name__}")
    if len(dedup_key) != count:
        raise MessageError(f"dedup_key: {len(dedup_key)} keys for {count} bodies (give one per body)")
    return [None if k is None else options.dedup_key(k) for k in dedup_key]


def _one_error(failed: list[tuple[BrokerError, list[str]]]) -> BrokerError:
    """One error for the partitions of a publish_many that failed (each
    with its messages' ids), the others having queued theirs: the failure
    itself when one partition failed; PublishNotSent when none of them sent
    anything; else PublishUncertain naming every message of the failed
    partitions (they carry dedup keys: publishing them again is safe)."""
    if len(failed) == 1:
        return failed[0][0]
    ids = [mid for _, group in failed for mid in group]
    text = "; ".join(str(exc) for exc, _ in failed)
    if all(isinstance(exc, PublishNotSent) for exc, _ in failed):
        return PublishNotSent(f"{len(failed)} partitions: {text}", ids)
    return PublishUncertain(f"{len(failed)} partitions: {text}", ids)


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
        self.namespace = _valid_name(namespace, "namespace")
        self.dedup_ttl_s = options.seconds(dedup_ttl, "dedup_ttl", zero_ok=False)
        self._dedup_ttls = dict(dedup_ttls or {})
        self.max_message_size = _valid_max_size(max_message_size)
        replicas = scalars.int_range(0, defaults.WAIT_REPLICAS_MAX)(wait_replicas, "wait_replicas", "")
        timeout_s = scalars.wait_timeout(wait_timeout, "wait_timeout", "")
        self._broker = Broker(_valid_url(url), namespace, client_name=f"smqsup-producer-{os.getpid()}", stats=stats,
                              wait_replicas=replicas, wait_timeout_s=timeout_s)
        self._registered: set[str] = set()
        #: queue -> the last partition a message without a key went to.
        self._turns: dict[str, int] = {}
        self._writers: dict[str, message.EnvelopeWriter] = {}
        self._stats = stats
        #: Messages this producer has published (the statistics read it).
        self.published = 0
        self.id = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self._next_flush = 0.0
        self._flushed: tuple[float, int] = (time.monotonic(), 0)
        self._rate = 0.0

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
                partition_key: Optional[str] = None) -> str:
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
        key goes by its dedup key; the others round-robin).

        Raises MessageError (bad queue name, not JSON, over max_message_size,
        a bad option) before anything is sent, PublishUncertain if the reply
        was lost.
        """
        self._check_queue(queue)
        by = None if partition_key is None else options.dedup_key(partition_key, "partition_key")
        if options.plain(delay, at, priority, ttl, dedup_key) and dedup_ttl is None:
            if headers is None and message_id is None:  # the envelope's fixed parts encoded once per queue
                mid = new_id()
                payload = self._writer(queue).payload(mid, body, created_at=time.time())
            else:
                mid, payload = message.encode_payload(queue, body, headers=headers, message_id=message_id,
                                                      max_size_bytes=self.max_message_size)
            self._send(queue, [message.frame(payload)], [mid], target=self._partition(queue, by, [mid]))
            return mid
        keys = [None if dedup_key is None else options.dedup_key(dedup_key)]
        mid = message.check_message_id(message_id) if message_id is not None else new_id()
        return self._send_with(queue, [body], [mid], headers, keys, self._options(queue, delay, at, priority, ttl,
                                                                                   dedup_key, dedup_ttl), by)[0]

    def publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]] = None, *,
                     delay: Any = None, at: Any = None, priority: int = 0,
                     dedup_key: "str | Sequence[Optional[str]] | None" = None, dedup_ttl: Any = None,
                     ttl: Any = None, partition_key: Optional[str] = None) -> list[str]:
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
        self._check_queue(queue)
        by = None if partition_key is None else options.dedup_key(partition_key, "partition_key")
        items = _materialise(queue, bodies)
        if options.plain(delay, at, priority, ttl, dedup_key) and dedup_ttl is None:
            writer = message.EnvelopeWriter(queue, headers, self.max_message_size)
            ids = new_ids(len(items))
            payload = writer.payload
            frames = [b"0|" + payload(mid, body) for mid, body in zip(ids, items)]
            self._send(queue, frames, ids, target=self._partition(queue, by, ids))
            return ids
        keys = _dedup_keys(dedup_key, len(items))
        opts = self._options(queue, delay, at, priority, ttl, dedup_key, dedup_ttl)
        return self._send_with(queue, items, new_ids(len(items)), headers, keys, opts, by)

    def _options(self, queue: str, delay: Any, at: Any, priority: Any, ttl: Any, dedup_key: Any,
                 dedup_ttl: Any) -> scripts.Options:
        if dedup_ttl is not None and dedup_key is None:
            raise MessageError("dedup_ttl: given without dedup_key (it is how long a dedup key holds)")
        return options.build(delay=delay, at=at, priority_=priority, ttl=ttl, dedup_ttl=dedup_ttl,
                             default_dedup_ttl_s=self._dedup_ttls.get(queue, self.dedup_ttl_s))

    def _send_with(self, queue: str, bodies: list[Any], ids: list[str], headers: Optional[Mapping[str, Any]],
                   keys: list[Optional[str]], opts: scripts.Options, by: Optional[str]) -> list[str]:
        """Encode and publish through publish_options.lua, to the partition of
        ``by``, else of each dedup key (else the next in turn); the ids
        returned (a deduplicated message's is the id holding its key)."""
        writer = message.EnvelopeWriter(queue, headers, self.max_message_size)
        items = [(mid, writer.payload(mid, body, key), key) for mid, body, key in zip(ids, bodies, keys)]
        if by is not None or all(key is None for key in keys) or len(set(keys)) == 1:
            target = self._partition(queue, by if by is not None else keys[0], ids)
            return [mid for mid, _ in self._send(queue, items, ids, opts, target=target)]
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(self._partition(queue, key, ids), []).append(i)
        out = list(ids)
        failed: list[tuple[BrokerError, list[str]]] = []
        for target, where in groups.items():
            try:
                pairs = self._send(queue, [items[i] for i in where], [ids[i] for i in where], opts, target=target)
            except BrokerError as exc:  # the other partitions' messages are still sent
                failed.append((exc, [ids[i] for i in where]))
                continue
            for i, (mid, _) in zip(where, pairs):
                out[i] = mid
        if failed:
            raise _one_error(failed)
        return out

    def _partition(self, queue: str, key: Optional[str], ids: list[str]) -> str:
        """The partition of ``queue`` a message with partition (or dedup)
        ``key`` goes to: the key's (CRC-32, as a producer in any language
        can compute it), or the next in turn. A queue's partition count
        is read from Redis (cached); PublishNotSent if it cannot be. A count
        Redis refuses to read (a key of the wrong type) is said once, and
        the messages go to the queue itself (partition 0)."""
        try:
            n = self._broker.queues.partitions(queue)
        except BrokerConnectionError as exc:
            raise PublishNotSent(f"{exc} (messages {ids[0]}..{ids[-1]} are not queued)", ids) from exc
        except BrokerError as exc:
            warn_once(log, f"partitions:{queue}", "queue %s: the partition count cannot be read (%s); publishing "
                      "to the queue itself (said once)", queue, exc)
            n = 1
        if n == 1:
            return queue
        if key is not None:
            return partition_name(queue, zlib.crc32(key.encode("utf-8")) % n)
        turn = self._turns[queue] = self._turns.get(queue, -1) + 1
        return partition_name(queue, turn % n)

    def _writer(self, queue: str) -> message.EnvelopeWriter:
        """The envelope writer of single publishes to ``queue`` without
        headers, kept (for at most _WRITERS_KEPT queues at once)."""
        writer = self._writers.get(queue)
        if writer is None:
            if len(self._writers) >= _WRITERS_KEPT:
                self._writers.clear()
            writer = self._writers[queue] = message.EnvelopeWriter(queue, None, self.max_message_size)
        return writer

    def _check_queue(self, queue: str) -> None:
        if not isinstance(queue, str) or queue not in self._registered:
            _valid_name(queue, "queue")

    def _send(self, queue: str, frames: "list[bytes] | list[tuple[str, bytes, Optional[str]]]", ids: list[str],
              opts: Optional[scripts.Options] = None, *, target: str) -> list[tuple[str, bool]]:
        """Publish plain ``frames``, or (id, payload, dedup key) items with
        ``opts``, to partition ``target`` of ``queue``; for items, what
        push_with() returns."""
        register = queue not in self._registered
        now = time.monotonic()
        # About once a second the producer's statistics ride along (same round trip).
        flush = self._stats and now >= self._next_flush
        stats = (self.id, self._stats_json(now, len(frames))) if flush else None
        pairs: list[tuple[str, bool]] = []
        try:
            if opts is None:
                self._broker.messages.push(target, frames, register=register, producer=stats)  # type: ignore[arg-type]
            else:
                pairs = self._broker.messages.push_with(target, frames, opts,  # type: ignore[arg-type]
                                                        register=register, producer=stats)
        except BrokerNotSent as exc:
            raise PublishNotSent(f"{exc} (messages {ids[0]}..{ids[-1]} are not queued)", ids) from exc
        except NotReplicated as exc:
            pairs = cast("list[tuple[str, bool]]", exc.result) if opts is not None else []
            self.published += len(frames) if opts is None else sum(queued for _, queued in pairs)
            self._registered.add(queue)
            raise PublishNotReplicated(f"{exc} (messages {ids[0]}..{ids[-1]} are queued on the master, but a "
                                       f"failover now could lose them)", ids, exc.replicas) from exc
        except PushRefused as exc:
            queued = [mid for mid, ok in zip(ids, exc.queued) if ok]
            self.published += len(queued)
            raise PublishRefused(str(exc), queued, [mid for mid, ok in zip(ids, exc.queued) if not ok]) from exc
        except BrokerConnectionError as exc:
            raise PublishUncertain(
                f"{exc} (messages {ids[0]}..{ids[-1]} may or may not be queued)", ids) from exc
        self._registered.add(queue)
        self.published += len(frames) if opts is None else sum(queued for _, queued in pairs)
        if flush:
            self._next_flush = now + 1.0
        return pairs

    def _stats_json(self, now: float, sending: int) -> str:
        then, count = self._flushed
        published = self.published + sending
        if now > then:
            instant = (published - count) / (now - then)
            self._rate += (instant - self._rate) * min(1.0, (now - then) / 10.0)
        self._flushed = (now, published)
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "namespace": self.namespace,
                           "published": published, "rate": round(self._rate, 2)}, separators=(",", ":"))

    def close(self) -> None:
        """Flush the statistics (best effort) and close the connection.

        Never raises for the flush: the messages are queued whatever happens to
        their statistics, so Redis refusing them (OOM under noeviction, an ACL
        NOPERM) or a lost connection is logged (a refusal as a warning once
        per process), never raised.
        """
        if self._stats and self.published:
            try:
                self._broker.messages.producer_stats(self.id, self._stats_json(time.monotonic(), 0))
            except BrokerConnectionError as exc:
                log.debug("producer %s: statistics not flushed at close: %s", self.id, exc)
            except BrokerError as exc:
                warn_once(log, "refused:producer statistics", "producer %s: Redis refused the producer statistics "
                          "(said once; later refusals at debug level): %s", self.id, exc)
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
