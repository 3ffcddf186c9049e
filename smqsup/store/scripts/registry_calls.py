"""Wrappers of the scripts on who consumes: heartbeat (register, renew),
stale (who missed theirs), the reclaims (reclaim, reclaim_stale,
return_free: a consumer's list back to the queue) and the leader lock
(lock_acquire, lock_renew, lock_release; compare_and_delete, which is
lock_release.lua on any key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from smqsup.keys import QueueKeys
from smqsup.store.scripts.calls import Call, Lock, escaped_texts, meta_json, scripts, texts, with_lock

(_RECLAIM, _RECLAIM_STALE, _RETURN_FREE, _HEARTBEAT, _STALE, _LOCK_ACQUIRE, _LOCK_RENEW,
 _LOCK_RELEASE) = SCRIPTS = scripts("reclaim", "reclaim_stale", "return_free", "heartbeat", "stale", "lock_acquire",
                                    "lock_renew", "lock_release")


@dataclass(frozen=True)
class ReclaimResult:
    requeued: int
    dead_lettered: int
    remaining: int


def _reclaim_result(reply: Sequence[Any]) -> ReclaimResult:
    requeued, dead, remaining = reply
    return ReclaimResult(int(requeued), int(dead), int(remaining))


def _reclaim_keys(keys: QueueKeys, consumer_id: str) -> list[str]:
    """KEYS[1..19] of reclaim.lua and reclaim_stale.lua: the consumer's list,
    pending, dead, counters, the registry, heartbeats, retired, the
    tracking keys (its cancel set, event stream and dependencies too), the
    group keys and the ready times."""
    return [keys.processing(consumer_id), keys.pending, keys.dead, keys.counters, keys.consumers, keys.heartbeats,
            keys.retired, keys.tracked, keys.tracked_expiry, keys.cancel, keys.events, keys.deps, *keys.groups,
            keys.ready_at]


def reclaim(keys: QueueKeys, consumer_id: str, *, costs_attempt: bool, retry_threshold: int, reason: str,
            batch: int, started: Optional[int] = None, returned: int = 0) -> Call[ReclaimResult]:
    """Return up to ``batch`` messages of a consumer that is gone to the
    queue (each one costing an attempt when ``costs_attempt``; with
    ``started``, only the oldest ``started`` of them: those the consumer had
    started, the rest go back free, as do the oldest ``returned`` of those,
    whose handlers returned); unregister it once its list is empty.
    ``reason`` goes with any dead letter."""
    return Call(_RECLAIM, _reclaim_keys(keys, consumer_id),
                (int(costs_attempt), retry_threshold, meta_json(reason, consumer=consumer_id), batch, consumer_id,
                 -1 if started is None else max(0, started), max(0, returned)), _reclaim_result)


def reclaim_stale(keys: QueueKeys, consumer_id: str, *, retry_threshold: int, reason: str, batch: int,
                  stale_after_ms: int, lock: Optional[Lock] = None) -> Call[ReclaimResult]:
    """Like a costly reclaim, only if the consumer's heartbeat is missing or
    older than ``stale_after_ms`` (``remaining`` -1 otherwise) and, with
    ``lock``, only if the lock holds its token (NOTLEADER otherwise)."""
    key_list, args = with_lock(
        _reclaim_keys(keys, consumer_id),
        [retry_threshold, meta_json(reason, consumer=consumer_id), batch, consumer_id, stale_after_ms], lock)
    return Call(_RECLAIM_STALE, key_list, args, _reclaim_result)


def return_free(keys: QueueKeys, consumer_id: str, *, reason: str, batch: int,
                lock: Optional[Lock] = None) -> Call[ReclaimResult]:
    """Return up to ``batch`` messages of the consumer's list to the queue
    free of cost, registry untouched; with ``lock``, only if the lock holds
    its token (NOTLEADER otherwise)."""
    key_list, args = with_lock([keys.processing(consumer_id), keys.pending, keys.dead, keys.counters, keys.tracked,
                                keys.tracked_expiry, keys.cancel, keys.events, keys.deps, *keys.groups],
                               [meta_json(reason, consumer=consumer_id), batch], lock)
    return Call(_RETURN_FREE, key_list, args, _reclaim_result)


#: A cancel asked for a message in a consumer's list: (consumer id, message
#: id, its place from the list's right end: 0 is the oldest).
Cancel = tuple[str, str, int]


def _heartbeat_result(reply: Sequence[Any]) -> tuple[list[str], list[Cancel]]:
    unknown, cancels = reply
    texts = escaped_texts(cancels[0::3]), escaped_texts(cancels[1::3])
    return escaped_texts(unknown), [(cid, mid, int(place)) for cid, mid, place in zip(*texts, cancels[2::3])]


def heartbeat(keys: QueueKeys, beats: Sequence[tuple[str, str]], *,
              register: bool) -> Call[tuple[list[str], list[Cancel]]]:
    """Register or renew consumers (id, info JSON); the ids that are no
    longer registered (declared dead), and (renewing) the cancels asked for
    messages in their lists."""
    args: list[Any] = [int(register)]
    for cid, info in beats:
        args += [cid, info]
    key_list = [keys.consumers, keys.heartbeats]
    if not register:
        key_list += [keys.cancel, *(keys.processing(cid) for cid, _ in beats)]
    return Call(_HEARTBEAT, key_list, args, _heartbeat_result)


def stale(keys: QueueKeys, *, timeout_ms: int, limit: int) -> Call[tuple[list[str], list[str]]]:
    """(stale ids, orphan ids) of a queue's consumers, by the Redis clock."""
    return Call(_STALE, (keys.heartbeats, keys.consumers), (timeout_ms, limit), _stale_result)


def _stale_result(reply: Sequence[Any]) -> tuple[list[str], list[str]]:
    stale_ids, orphans = reply
    return texts(stale_ids), texts(orphans)


def lock_acquire(key: str, token: str, ttl_ms: int) -> Call[int]:
    """1: acquired; 0: held by another; -1: the key never expired, now it does."""
    return Call(_LOCK_ACQUIRE, (key,), (token, ttl_ms), int)


def lock_renew(key: str, token: str, ttl_ms: int) -> Call[bool]:
    return Call(_LOCK_RENEW, (key,), (token, ttl_ms), bool)


def lock_release(key: str, token: str) -> Call[bool]:
    return Call(_LOCK_RELEASE, (key,), (token,), bool)


def compare_and_delete(key: str, value: "bytes | str") -> Call[bool]:
    """Delete ``key`` only while it holds exactly ``value`` (lock_release.lua
    is that compare-and-delete); whether it was deleted."""
    return Call(_LOCK_RELEASE, (key,), (value,), bool)
