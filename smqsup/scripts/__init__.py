"""Typed Python wrappers of the Lua scripts beside this file, one per operation.

Each wrapper sends one EVALSHA (one round trip), or EVAL once if the server
does not know the script yet: a NOSCRIPT reply means the script did not run,
so that one re-send can never apply an operation twice. Errors are left as
redis-py raises them; broker.py wraps them.

A line ``--- @include "name"`` in a script is replaced by ``includes/name.lua``
when the script is loaded (bullmq's convention): a helper several scripts
need is written once. Includes may include others; each is inlined once per
script, where it is first named (a Lua ``local function`` must come before
its callers).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Optional, Union

import redis
from redis.exceptions import NoScriptError

from smqsup.keys import QueueKeys

Client = Union["redis.Redis", "redis.client.Pipeline"]
#: What a script is sent through: a redis-py client, or anything with the same
#: evalsha() and eval() (the broker's held connection for the hot path).
ScriptClient = Any
#: (lock key, owner token) of the garbage-collector lock a script must check.
Lock = tuple[str, str]


_INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.MULTILINE)


def _source(name: str) -> str:
    """The text of ``name.lua`` with its includes resolved."""
    here = resources.files(__name__)
    return _resolve(here.joinpath(f"{name}.lua").read_text("utf-8"), set())


def _resolve(text: str, seen: set[str]) -> str:
    """``text`` with each include line replaced by that include (resolved in
    turn), or by nothing if an earlier line of the script included it."""
    def inline(match: re.Match[str]) -> str:
        if match[1] in seen:
            return ""
        seen.add(match[1])
        path = resources.files(__name__).joinpath("includes", f"{match[1]}.lua")
        return _resolve(path.read_text("utf-8"), seen).rstrip("\n")
    return _INCLUDE.sub(inline, text)


class Script:
    """One Lua file, called by SHA with a fallback to its text."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.text = _source(name)
        self.sha = hashlib.sha1(self.text.encode("utf-8")).hexdigest()

    def __call__(self, client: ScriptClient, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.text, len(keys), *keys, *args)


_ACK = Script("ack")
_NACK = Script("nack")
_RECLAIM = Script("reclaim")
_RECLAIM_STALE = Script("reclaim_stale")
_RETURN_FREE = Script("return_free")
_PROMOTE = Script("promote")
_DLQ_REQUEUE = Script("dlq_requeue")
_PUBLISH = Script("publish")
_PRODUCER_STATS = Script("producer_stats")
_HEARTBEAT = Script("heartbeat")
_STALE = Script("stale")
_LOCK_ACQUIRE = Script("lock_acquire")
_LOCK_RENEW = Script("lock_renew")
_LOCK_RELEASE = Script("lock_release")

HEARTBEAT = _HEARTBEAT
PUBLISH = _PUBLISH
PRODUCER_STATS = _PRODUCER_STATS

ALL = (_ACK, _NACK, _RECLAIM, _RECLAIM_STALE, _RETURN_FREE, _PROMOTE, _DLQ_REQUEUE, _PUBLISH, _PRODUCER_STATS,
       _HEARTBEAT, _STALE, _LOCK_ACQUIRE, _LOCK_RENEW, _LOCK_RELEASE)

#: nack outcomes, as the script returns them.
LATE, RETRIED, DELAYED, DEAD = 0, 1, 2, 3


@dataclass(frozen=True)
class AckResult:
    acked: bool  # False: a late ack, the message had been reclaimed
    next_frame: Optional[bytes]
    registered: bool = True  # False: declared dead; stop using this identity


@dataclass(frozen=True)
class NackResult:
    outcome: int  # LATE, RETRIED, DELAYED or DEAD
    next_frame: Optional[bytes]
    registered: bool = True


@dataclass(frozen=True)
class ReclaimResult:
    requeued: int
    dead_lettered: int
    remaining: int


@dataclass(frozen=True)
class PromoteResult:
    moved: int
    wait_ms: int  # until the next delayed message is due; -1: none delayed


def _frame_or_none(reply: Any) -> Optional[bytes]:
    """A fetched frame, or None for Lua's false. An empty frame is a frame
    (hostile bytes are still bytes to dead-letter), never "nothing fetched"."""
    return None if reply is None or reply is False else bytes(reply)


def meta_json(reason: str, **fields: Any) -> str:
    """Dead-letter metadata text for the scripts: a JSON object with a reason.

    ASCII-escaped, so that any text a handler's exception carries (lone
    surrogates, newlines) makes valid UTF-8 and one line; the scripts rely on
    the metadata holding no raw newline (a dead-letter entry is
    ``meta "\\n" frame``)."""
    return json.dumps({"reason": reason, **fields}, separators=(",", ":"), ensure_ascii=True, default=str)


def ack(client: ScriptClient, keys: QueueKeys, consumer_id: str, frame: bytes, fetch_next: bool,
        count: bool = True) -> AckResult:
    """Remove ``frame`` from the consumer's list; take the next one if asked."""
    acked, nxt, registered = _ACK(client, (keys.processing(consumer_id), keys.pending, keys.counters,
                                            keys.consumers), (frame, int(fetch_next), consumer_id, int(count)))
    return AckResult(bool(acked), _frame_or_none(nxt), bool(registered))


def nack(
    client: ScriptClient,
    keys: QueueKeys,
    consumer_id: str,
    frame: bytes,
    *,
    retry_threshold: int,
    delay_ms: int,
    meta: str,
    fetch_next: bool,
) -> NackResult:
    """Count a failed attempt of ``frame``: retry, delay or dead-letter it."""
    outcome, nxt, registered = _NACK(
        client,
        (keys.processing(consumer_id), keys.pending, keys.delayed, keys.dead, keys.counters, keys.consumers),
        (frame, retry_threshold, max(0, int(delay_ms)), meta, int(fetch_next), consumer_id),
    )
    return NackResult(int(outcome), _frame_or_none(nxt), bool(registered))


def _registry_keys(keys: QueueKeys, consumer_id: str) -> list[str]:
    """KEYS[1..7] of reclaim.lua and reclaim_stale.lua."""
    return [keys.processing(consumer_id), keys.pending, keys.dead, keys.counters, keys.consumers,
            keys.heartbeats, keys.retired]


def _reclaim_result(reply: Sequence[Any]) -> ReclaimResult:
    requeued, dead, remaining = reply
    return ReclaimResult(int(requeued), int(dead), int(remaining))


def reclaim(client: "redis.Redis", keys: QueueKeys, consumer_id: str, *, costs_attempt: bool,
            retry_threshold: int, meta: str, batch: int) -> ReclaimResult:
    """Return up to ``batch`` messages of a consumer that is gone to the
    queue (each one costing an attempt when ``costs_attempt``); unregister it
    once its list is empty."""
    args = (int(costs_attempt), retry_threshold, meta, batch, consumer_id)
    return _reclaim_result(_RECLAIM(client, _registry_keys(keys, consumer_id), args))


def reclaim_stale(client: "redis.Redis", keys: QueueKeys, consumer_id: str, *, retry_threshold: int, meta: str,
                  batch: int, stale_after_ms: int, lock: Optional[Lock] = None) -> ReclaimResult:
    """Like a costly reclaim, only if the consumer's heartbeat is missing or
    older than ``stale_after_ms`` (``remaining`` -1 otherwise) and, with
    ``lock``, only if the lock holds its token (NOTLEADER otherwise)."""
    key_list = _registry_keys(keys, consumer_id)
    args: list[Any] = [retry_threshold, meta, batch, consumer_id, stale_after_ms]
    if lock is not None:
        key_list.append(lock[0])
        args.append(lock[1])
    return _reclaim_result(_RECLAIM_STALE(client, key_list, args))


def return_free(client: "redis.Redis", keys: QueueKeys, consumer_id: str, *, meta: str, batch: int,
                lock: Optional[Lock] = None) -> ReclaimResult:
    """Return up to ``batch`` messages of the consumer's list to the queue
    free of cost, registry untouched; with ``lock``, only if the lock holds
    its token (NOTLEADER otherwise)."""
    key_list = [keys.processing(consumer_id), keys.pending, keys.dead, keys.counters]
    args: list[Any] = [meta, batch]
    if lock is not None:
        key_list.append(lock[0])
        args.append(lock[1])
    return _reclaim_result(_RETURN_FREE(client, key_list, args))


def promote(client: "redis.Redis", keys: QueueKeys, *, batch: int, lock: Optional[Lock] = None) -> PromoteResult:
    """Move due delayed messages to pending, at most ``batch`` of them."""
    key_list = [keys.delayed, keys.pending]
    args: list[Any] = [batch]
    if lock is not None:
        key_list.append(lock[0])
        args.append(lock[1])
    moved, wait_ms = _PROMOTE(client, key_list, args)
    return PromoteResult(int(moved), int(wait_ms))


def dlq_requeue(client: "redis.Redis", keys: QueueKeys, entries: Sequence[bytes]) -> int:
    """Move the given dead-letter entries back to pending, attempts reset."""
    if not entries:
        return 0
    return int(_DLQ_REQUEUE(client, (keys.dead, keys.pending, keys.counters), entries))


def heartbeat(client: "redis.Redis", keys: QueueKeys, beats: Sequence[tuple[str, str]], *,
              register: bool) -> list[str]:
    """Register or renew consumers (id, info JSON); return the ids that are no
    longer registered (declared dead)."""
    args: list[Any] = [int(register)]
    for cid, info in beats:
        args += [cid, info]
    return _texts(_HEARTBEAT(client, (keys.consumers, keys.heartbeats), args))


def stale(client: "redis.Redis", keys: QueueKeys, *, timeout_ms: int, limit: int) -> tuple[list[str], list[str]]:
    """(stale ids, orphan ids) of a queue's consumers, by the Redis clock."""
    stale_ids, orphans = _STALE(client, (keys.heartbeats, keys.consumers), (timeout_ms, limit))
    return _texts(stale_ids), _texts(orphans)


def _texts(items: Sequence[Any]) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in items]


def lock_acquire(client: "redis.Redis", key: str, token: str, ttl_ms: int) -> int:
    """1: acquired; 0: held by another; -1: the key never expired, now it does."""
    return int(_LOCK_ACQUIRE(client, (key,), (token, ttl_ms)))


def lock_renew(client: "redis.Redis", key: str, token: str, ttl_ms: int) -> bool:
    return bool(_LOCK_RENEW(client, (key,), (token, ttl_ms)))


def lock_release(client: "redis.Redis", key: str, token: str) -> bool:
    return bool(_LOCK_RELEASE(client, (key,), (token,)))


def publish(client: ScriptClient, keys: QueueKeys, frames: Sequence[bytes], count: bool = True) -> int:
    """LPUSH ``frames`` (oldest first) and count them; the pending length after."""
    return int(_PUBLISH(client, (keys.pending, keys.counters), (int(count), *frames)))
