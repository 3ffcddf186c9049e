"""What a queue declares in Redis for its producers (result_ttl, events_max)
and its partition count, read from replies with bounds (Declared), and
kept: PartitionCache, the one cache both drivers read through (Queues,
AsyncBroker), and partitions(), the plan of its one round trip. No I/O."""

from __future__ import annotations

import time
from typing import NamedTuple, Optional

import redis.exceptions as rexc

from smqsup import defaults
from smqsup.keys import QueueKeys, partition_names
from smqsup.store.core.plans import Command, Plan
from smqsup.store.core.replies import UNREACHABLE


def partition_count(raw: object) -> int:
    """A partition count as stored (GET's reply), read as partitions.lua
    reads it: a whole number from 1 (at most defaults.PARTITIONS_MAX), else 1."""
    text = raw.decode("ascii", "replace").strip() if isinstance(raw, bytes) else ""
    digits = text.lstrip("0")
    if not (text.isascii() and text.isdigit()) or not digits:
        return 1
    # (never int() of thousands of digits: Python refuses those)
    return defaults.PARTITIONS_MAX if len(digits) > 4 else min(int(digits), defaults.PARTITIONS_MAX)


#: The fields of ns:{Q}:options, in Declared's order.
DECLARED_FIELDS = ("result_ttl", "events_max")


class Declared(NamedTuple):
    """What a queue's consumers declare for its producers to apply to
    every message published without saying otherwise (ns:{Q}:options)."""

    result_ttl_s: int = 0  # tracked this long after it ends; 0: not tracked
    events_max: int = 0  # its lifecycle goes to the event stream, capped at this; 0: no events

    def fields(self) -> dict[str, str]:
        return {"result_ttl": str(self.result_ttl_s), "events_max": str(self.events_max)}

    @classmethod
    def read(cls, said: object) -> "Declared":
        """The options as HMGET DECLARED_FIELDS returned them: a field that
        holds junk (someone wrote it, or an error came back) is 0."""
        values = list(said) if isinstance(said, list) and len(said) == len(DECLARED_FIELDS) else [None, None]
        return cls(_whole(values[0], defaults.RESULT_TTL_MAX_S), _whole(values[1], defaults.EVENTS_MAX_MAX))


NOTHING_DECLARED = Declared()


def _whole(raw: object, most: int) -> int:
    """A declared number as Redis returned it: a whole number up to
    ``most``; anything else is 0."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else ""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(most)):
        return 0
    return min(int(text), most)


class PartitionCache:
    """Each queue's partition count (read again at most every
    PARTITIONS_READ_S) and what its consumers declared, as a store read
    them last (partitions() updates it)."""

    def __init__(self) -> None:
        #: queue -> (partitions, monotonic time read).
        self.counts: dict[str, tuple[int, float]] = {}
        #: What each queue's consumers declared for producers, read with its partitions.
        self.declared: dict[str, Declared] = {}

    def fresh(self, queue: str, fresh: bool = False) -> Optional[int]:
        """The count of ``queue`` if read less than PARTITIONS_READ_S ago (and not ``fresh`` asked); else None."""
        known = self.counts.get(queue)
        if not fresh and known is not None and time.monotonic() - known[1] < defaults.PARTITIONS_READ_S:
            return known[0]
        return None

    def remember(self, queue: str, count: int) -> int:
        self.counts[queue] = (count, time.monotonic())
        return count

    def names(self, queue: str, count: Optional[int], at_least: int = 1) -> list[str]:
        """The partitions of ``queue``: ``count`` of them, or (None: it
        could not be read) as many as read last; at least ``at_least``."""
        n = self.counts.get(queue, (1, 0.0))[0] if count is None else count
        return partition_names(queue, max(n, at_least))


def partitions(cache: PartitionCache, keys: QueueKeys, queue: str) -> Plan[int]:
    """The plan of a partition count's reading: GET of the count and HMGET
    of the declared options in one round trip, both kept in ``cache``
    (options read with a count that could not be read still count)."""
    raw, said = yield [Command(("GET", keys.partitions)), Command(("HMGET", keys.options, *DECLARED_FIELDS))]
    if isinstance(said, UNREACHABLE):
        raise said
    cache.declared[queue] = Declared.read(said)
    if isinstance(raw, Exception):
        raise raw
    return cache.remember(queue, partition_count(raw))


def names_of(cache: PartitionCache, keys: QueueKeys, queue: str) -> Plan[list[str]]:
    """The plan of a queue's partition names: the cached count, else read
    (partitions()); a count Redis holds but refuses to give (a key of the
    wrong type) leaves the count read last, as Queues.partition_names does."""
    count = cache.fresh(queue)
    if count is None:
        try:
            count = yield from partitions(cache, keys, queue)
        except rexc.RedisError:
            count = None
    return cache.names(queue, count)
