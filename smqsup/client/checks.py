"""The checks of a publish's arguments that every producer shares (sync
and asyncio), each returning the checked value or raising one bounded
line: names, the url, the size limit, publish_many's bodies and dedup keys,
the error of a publish_many whose partitions failed apart."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from smqsup import safe
from smqsup.client import options
from smqsup.config.names import validate_queue_name
from smqsup.config.scalars import REDIS_STRING_MAX_BYTES
from smqsup.errors import BrokerError, ConfigError, MessageError, PublishNotSent, PublishUncertain


def valid_name(name: object, what: str) -> str:
    """``name`` if it is a valid queue name or namespace; MessageError (one
    bounded line) for anything else, whatever its type."""
    if not isinstance(name, str):
        raise MessageError(f"{what}: expected a name string, got a value of type {type(name).__name__}")
    try:
        return validate_queue_name(name)
    except ConfigError as exc:
        raise MessageError(f"{what} {safe.escape(repr(name), 80)}: {str(exc).split(': ', 1)[-1]}") from None


def valid_url(url: object) -> str:
    """``url`` if it is a string (the store's connect checks the rest); ConfigError otherwise."""
    if not isinstance(url, str):
        raise ConfigError(f"redis.url: expected a url string, got a value of type {type(url).__name__}")
    return url


def valid_max_size(size: object) -> int:
    """``size`` if it is a whole number of bytes Redis can hold; ConfigError otherwise."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= REDIS_STRING_MAX_BYTES:
        shown = safe.escape(size, 40) if isinstance(size, (int, float, str)) else f"a value of type {type(size).__name__}"
        raise ConfigError(f"max_message_size: expected bytes from 1 to {REDIS_STRING_MAX_BYTES}, got {shown}")
    return size


def materialise(queue: str, bodies: object) -> list[Any]:
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


def dedup_keys(dedup_key: object, count: int) -> list[Optional[str]]:
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


def one_error(failed: list[tuple[BrokerError, list[str]]]) -> BrokerError:
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
