"""Publishing messages: the public Producer API.

    from smqsup import Producer
    producer = Producer("redis://127.0.0.1:6379/0")
    message_id = producer.publish("orders", {"order": 42})
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Optional

from smqsup import defaults, message, safe
from smqsup.broker import Broker
from smqsup.errors import (
    BrokerConnectionError,
    BrokerError,
    BrokerNotSent,
    ConfigError,
    MessageError,
    PublishNotSent,
    PublishRefused,
    PublishUncertain,
    PushRefused,
)
from smqsup.logs import warn_once
from smqsup.validate import REDIS_STRING_MAX_BYTES, validate_queue_name

log = logging.getLogger(__name__)


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
                 max_message_size: int = defaults.MAX_MESSAGE_SIZE_BYTES, stats: bool = True) -> None:
        self.namespace = _valid_name(namespace, "namespace")
        self.max_message_size = _valid_max_size(max_message_size)
        self._broker = Broker(_valid_url(url), namespace, client_name=f"smqsup-producer-{os.getpid()}", stats=stats)
        self._registered: set[str] = set()
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
        from smqsup import config as config_mod
        from smqsup.embedded import redis_url

        cfg = config_mod.load(path)
        return cls(redis_url(cfg), cfg.namespace, max_message_size=cfg.max_message_size_bytes, stats=cfg.stats)

    def publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]] = None, *,
                message_id: Optional[str] = None) -> str:
        """Queue one message in one round trip; return its id.

        Raises MessageError (bad queue name, not JSON, over max_message_size)
        before anything is sent, PublishUncertain if the reply was lost.
        """
        self._check_queue(queue)
        mid, payload = message.encode_payload(queue, body, headers=headers, message_id=message_id,
                                              max_size_bytes=self.max_message_size)
        self._send(queue, [message.frame(payload)], [mid])
        return mid

    def publish_many(self, queue: str, bodies: Iterable[Any],
                     headers: Optional[Mapping[str, Any]] = None) -> list[str]:
        """Queue many messages in one round trip; return their ids in order.
        Every body is encoded and checked before anything is sent; a lost
        reply raises PublishUncertain naming all of them."""
        self._check_queue(queue)
        writer = message.EnvelopeWriter(queue, headers, self.max_message_size)
        items = _materialise(queue, bodies)
        ids = message.new_ids(len(items))
        payload = writer.payload
        frames = [b"0|" + payload(mid, body) for mid, body in zip(ids, items)]
        self._send(queue, frames, ids)
        return ids

    def _check_queue(self, queue: str) -> None:
        if not isinstance(queue, str) or queue not in self._registered:
            _valid_name(queue, "queue")

    def _send(self, queue: str, frames: list[bytes], ids: list[str]) -> None:
        register = queue not in self._registered
        now = time.monotonic()
        # About once a second the producer's statistics ride along (same round trip).
        flush = self._stats and now >= self._next_flush
        stats = (self.id, self._stats_json(now, len(frames))) if flush else None
        try:
            self._broker.push(queue, frames, register=register, producer=stats)
        except BrokerNotSent as exc:
            raise PublishNotSent(f"{exc} (messages {ids[0]}..{ids[-1]} are not queued)", ids) from exc
        except PushRefused as exc:
            queued = [mid for mid, ok in zip(ids, exc.queued) if ok]
            self.published += len(queued)
            raise PublishRefused(str(exc), queued, [mid for mid, ok in zip(ids, exc.queued) if not ok]) from exc
        except BrokerConnectionError as exc:
            raise PublishUncertain(
                f"{exc} (messages {ids[0]}..{ids[-1]} may or may not be queued)", ids) from exc
        self._registered.add(queue)
        self.published += len(frames)
        if flush:
            self._next_flush = now + 1.0

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
                self._broker.producer_stats(self.id, self._stats_json(time.monotonic(), 0))
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
