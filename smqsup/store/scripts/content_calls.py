"""Wrappers of the scripts operators use on what a queue holds: peek_range
(a bounded read of a list or sorted set, for listings), remove (waiting
messages by id), dlq_requeue and dlq_purge (dead letters); and partitions
(a queue's partition count, declared).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from smqsup import defaults
from smqsup.keys import QueueKeys
from smqsup.store.scripts.calls import Call, bytes_or_none, dedup_index, escaped_texts, meta_json, scripts

_DLQ_REQUEUE, _REMOVE, _DLQ_PURGE, _PARTITIONS, _PEEK_RANGE, _GROUP_PAUSE, _GROUP_REPAIR = SCRIPTS = scripts(
    "dlq_requeue", "remove", "dlq_purge", "partitions", "peek_range", "group_pause", "group_repair")


def group_repair(keys: QueueKeys, consumers: Sequence[str], lock: tuple[str, str], limit: int, cursor: bytes,
                 count: int) -> Call[tuple[bytes, int, int, int]]:
    """The collector's repair of the queue's groups (group_repair.lua): the
    running counts recounted from the lists of ``consumers`` (the registered
    ones), a turn for each group that lost its own, a slice of ``count``
    groups and of ``count`` ready members from ``cursor`` (opaque, b"0" the
    start); (the next cursor, counts set right, turns given, members that
    were no group's dead-lettered)."""
    garbage = meta_json("malformed", error="not a message group's member (in groups:ready, found by the collector)")
    return Call(_GROUP_REPAIR, (keys.pending, *keys.groups, keys.consumers, lock[0], keys.dead,
                                *(keys.processing(c) for c in consumers)),
                (lock[1], limit, cursor, count, *consumers, garbage),
                lambda reply: (bytes(reply[0]) if isinstance(reply[0], bytes) else str(reply[0]).encode(),
                               int(reply[1]), int(reply[2]), int(reply[3])))


def group_pause(keys: QueueKeys, group: bytes, info: str) -> Call[bool]:
    """Pause message group ``group`` (``info``: the pause's record, JSON), or
    resume it (``info`` ""); whether that changed anything."""
    return Call(_GROUP_PAUSE, (keys.pending, *keys.groups), (group, info), bool)


def remove(keys: QueueKeys, chosen: Sequence[tuple[str, bytes, str, Optional[str]]]) -> Call[list[bool]]:
    """Remove (where, frame, id, dedup key or None) waiting messages; per
    message whether it was still there."""
    key_list = [keys.pending, keys.priority, keys.scheduled, keys.delayed, keys.counters, keys.tracked,
                keys.tracked_expiry, keys.events, keys.deps, keys.groups[0], keys.groups[1]]
    args: list[Any] = []
    for where, frame, mid, dedup_key in chosen:
        args += [where, frame, mid, dedup_index(key_list, keys, dedup_key)]
    return Call(_REMOVE, key_list, args, lambda reply: [bool(n) for n in reply])


def dlq_purge(keys: QueueKeys, dead_key: str, entries: Sequence[tuple[bytes, str, Optional[str]]]) -> Call[int]:
    """Delete (entry, message id, dedup key or None) dead letters from
    ``dead_key``, freeing their dedup keys; how many were there."""
    key_list = [dead_key]
    args: list[Any] = []
    for entry, mid, dedup_key in entries:
        args += [entry, mid, dedup_index(key_list, keys, dedup_key)]
    return Call(_DLQ_PURGE, key_list, args, int)


def dlq_requeue(keys: QueueKeys, entries: Sequence[bytes]) -> Call[int]:
    """Move the given dead-letter entries back to pending, attempts reset
    (call with at least one entry)."""
    return Call(_DLQ_REQUEUE, (keys.dead, keys.pending, keys.counters, keys.priority, keys.priority_seq,
                               keys.tracked, keys.tracked_expiry, keys.events, *keys.groups), entries,
                int)


def partitions(keys: QueueKeys, count: int) -> Call[int]:
    """Declare ``count`` partitions of the queue; the count stored (the larger)."""
    return Call(_PARTITIONS, (keys.partitions,), (count, defaults.PARTITIONS_MAX), int)


@dataclass(frozen=True)
class Peeked:
    """One element as peek_range.lua read it: its real ``size`` (bytes) and
    ``data``, the element whole or, when it was ``cut``, its head; for a cut
    one, ``after`` (the head of what follows its first separator, when asked
    for one) and ``digest`` (SHA-1 hex of the whole element, when the head it
    is named by holds no message id); a sorted set's ``score``."""

    size: int
    data: bytes
    after: Optional[bytes] = None
    score: Optional[float] = None
    digest: Optional[str] = None

    @property
    def cut(self) -> bool:
        return len(self.data) < self.size


@dataclass
class ReadBudget:
    """What one listing may still read (peek_range.lua's ARGV[5..6]): of
    each element ``head`` bytes (twice, read with a separator), and
    ``whole`` bytes more in all for the elements it reads whole."""

    head: int
    whole: int

    @classmethod
    def for_rows(cls, rows: int, parts: int = 1) -> "ReadBudget":
        """The budget of a listing that reads at most ``rows`` elements of
        ``parts`` heads each: LISTING_HEADS_BYTES shared by their heads
        (within the head bounds) and LISTING_WHOLE_BYTES for whole ones."""
        head = defaults.LISTING_HEADS_BYTES // max(1, rows * parts)
        return cls(min(max(head, defaults.LISTING_HEAD_MIN_BYTES), defaults.LISTING_HEAD_MAX_BYTES),
                   defaults.LISTING_WHOLE_BYTES)


def _peeked(reply: Sequence[Any]) -> tuple[str, int, list[Peeked]]:
    found, whole, *flat = reply
    elements = []
    for size, data, after, score, digest in zip(*[iter(flat)] * 5):
        score_text, digest_text = bytes_or_none(score), bytes_or_none(digest)
        elements.append(Peeked(int(size), bytes(data), bytes_or_none(after),
                               None if score_text is None else float(score_text),
                               None if digest_text is None else digest_text.decode("ascii")))
    return escaped_texts([found])[0], int(whole), elements


def peek_range(key: str, kind: str, first: int, step: int, count: int, budget: ReadBudget,
               split: bytes = b"") -> Call[tuple[str, int, list[Peeked]]]:
    """Read up to ``count`` elements of the list or sorted set ``key``
    (``kind``: "list" or "zset") from index ``first`` by ``step`` within
    ``budget`` (``split``: the separator after which a cut element's second
    head starts); (the key's type, the whole budget left, the elements). A
    key of another type reads nothing."""
    return Call(_PEEK_RANGE, (key,), (kind, first, step, count, budget.head, budget.whole, split), _peeked)
