"""Typed Python wrappers of the Lua scripts beside this file, one per operation.

Each wrapper returns a ``Call``: the script, its KEYS and ARGV in the order
the script's header gives (written here once), and the reader of its reply.
``call.run(client)`` sends it alone; ``Batch`` sends several calls and plain
commands in one pipelined round trip, each reply read by its call's reader.

A call goes by EVALSHA, and by EVAL once if the server does not know the
script yet: a NOSCRIPT reply means the script did not run, so that one
re-send can never apply an operation twice. Errors are left as redis-py
raises them; broker.py wraps them.

A line ``--- @include "name"`` in a script is replaced by ``includes/name.lua``
when the script is loaded (bullmq's convention): a helper several scripts
need is written once. Includes may include others; each is inlined once per
script, where it is first named (a Lua ``local function`` must come before
its callers).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generic, Optional, TypeVar, cast

import redis
from redis.exceptions import NoScriptError, ResponseError

from smqsup import defaults
from smqsup.keys import QueueKeys, producers_hash, producers_seen

#: What a script is sent through: a redis-py client, or anything with the same
#: evalsha() and eval() (the broker's held connection for the hot path).
ScriptClient = Any
#: (lock key, owner token) of the garbage-collector lock a script must check.
Lock = tuple[str, str]
T = TypeVar("T")


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

    def __call__(self, client: ScriptClient, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.text, len(keys), *keys, *args)


class Call(Generic[T]):
    """One call of a script: its KEYS and ARGV, and the reader of its reply."""

    __slots__ = ("script", "keys", "args", "read")

    def __init__(self, script: Script, keys: Sequence[Any], args: Sequence[Any], read: Callable[[Any], T]) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.read = read

    def run(self, client: ScriptClient) -> T:
        """Send the call alone (one round trip) and read its reply."""
        return self.read(self.script(client, self.keys, self.args))


class Batch:
    """Script calls and plain commands sent in one round trip (a pipeline, no
    transaction). A script the server does not know (NOSCRIPT: it did not
    run) is sent again alone by its text after the round trip; nothing that
    ran is ever sent twice. Replies come back in order, each script's read by
    its call; an error reply is left in its place as the exception."""

    def __init__(self, client: "redis.Redis") -> None:
        self._client = client
        self._commands: list[tuple[Any, ...]] = []
        self._calls: list[Optional[Call[Any]]] = []
        #: Index -> the key a keyless command (WAIT) is routed by.
        self._routes: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def command(self, *args: Any, route: Any = None) -> None:
        """Add a plain command; ``route``: the key a cluster sends a keyless
        one (WAIT) by, to the master of the commands before it."""
        if route is not None:
            self._routes[len(self._calls)] = route
        self._commands.append(args)
        self._calls.append(None)

    def add(self, call: Call[Any]) -> None:
        self._commands.append(("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args))
        self._calls.append(call)

    def is_wait(self, i: int) -> bool:
        return self._calls[i] is None and str(self._commands[i][0]).upper() == "WAIT"

    def key(self, i: int) -> Any:
        """The first key of command ``i`` (what a cluster routes it by)."""
        call = self._calls[i]
        if call is not None:
            return call.keys[0]
        return self._routes[i] if i in self._routes else self._commands[i][1]

    def execute(self, connection: Any) -> list[Any]:
        """Send everything on ``connection`` (taken from the client's pool by
        the caller, which so learns whether anything could be sent; it goes
        back to the pool after) and return the replies."""
        return self.deliver(self._client, connection, range(len(self)))

    def deliver(self, client: "redis.Redis", connection: Any, indexes: Sequence[int]) -> list[Any]:
        """Send the commands at ``indexes`` on ``connection``, one of
        ``client``'s (a cluster's master, for the commands of its slots)."""
        pipe = client.pipeline(transaction=False)
        for i in indexes:
            pipe.execute_command(*self._commands[i])  # type: ignore[no-untyped-call]
        pipe.connection = connection
        replies: list[Any] = pipe.execute(raise_on_error=False)
        unknown = [n for n, (i, reply) in enumerate(zip(indexes, replies))
                   if self._calls[i] is not None and isinstance(reply, NoScriptError)]
        if unknown:
            self._again_by_text(client, indexes, replies, unknown)
        return [self._read(i, reply) for i, reply in zip(indexes, replies)]

    def _again_by_text(self, client: "redis.Redis", indexes: Sequence[int], replies: list[Any],
                       unknown: Sequence[int]) -> None:
        """Send again by their text (EVAL) the script calls at positions
        ``unknown`` of ``replies`` that NOSCRIPT refused (they did not run),
        in order, on one connection of ``client``; then the batch's WAITs
        again on it. A WAIT that ran in the pipeline came before these
        writes and so confirmed none of them; one sent after them on the
        same master confirms them and everything before (the replication
        stream is one). Their replies replace the refusals in ``replies``."""
        conn = client.connection_pool.get_connection()
        try:
            for n in unknown:
                call = cast(Call[Any], self._calls[indexes[n]])
                replies[n] = _reply(conn, "EVAL", call.script.text, len(call.keys), *call.keys, *call.args)
            for n, i in enumerate(indexes):
                if self.is_wait(i):
                    replies[n] = _reply(conn, *self._commands[i])
        finally:
            client.connection_pool.release(conn)

    def run_one(self, client: Any, i: int) -> Any:
        """Command ``i`` sent alone on ``client`` (its error raised)."""
        call = self._calls[i]
        return client.execute_command(*self._commands[i]) if call is None else call.run(client)

    def _read(self, i: int, reply: Any) -> Any:
        call = self._calls[i]
        return reply if call is None or isinstance(reply, Exception) else call.read(reply)


def _reply(conn: Any, *args: Any) -> Any:
    """Send one command on a connection held by the caller; its reply, or
    the error Redis answered with (a lost connection raises)."""
    conn.send_command(*args)
    try:
        return conn.read_response()
    except ResponseError as exc:
        return exc


_ACK = Script("ack")
_NACK = Script("nack")
_RECLAIM = Script("reclaim")
_RECLAIM_STALE = Script("reclaim_stale")
_RETURN_FREE = Script("return_free")
_PROMOTE = Script("promote")
_DLQ_REQUEUE = Script("dlq_requeue")
_PUBLISH = Script("publish")
_PUBLISH_OPTIONS = Script("publish_options")
_TAKE = Script("take")
_SCREEN = Script("screen")
_REMOVE = Script("remove")
_DLQ_PURGE = Script("dlq_purge")
_PRODUCER_STATS = Script("producer_stats")
_HEARTBEAT = Script("heartbeat")
_STALE = Script("stale")
_LOCK_ACQUIRE = Script("lock_acquire")
_LOCK_RENEW = Script("lock_renew")
_LOCK_RELEASE = Script("lock_release")

_PARTITIONS = Script("partitions")
_PEEK_RANGE = Script("peek_range")

ALL = (_PARTITIONS, _ACK, _NACK, _RECLAIM, _RECLAIM_STALE, _RETURN_FREE, _PROMOTE, _DLQ_REQUEUE, _PUBLISH, _PRODUCER_STATS,
       _HEARTBEAT, _STALE, _LOCK_ACQUIRE, _LOCK_RENEW, _LOCK_RELEASE, _PUBLISH_OPTIONS, _TAKE, _SCREEN, _REMOVE,
       _DLQ_PURGE, _PEEK_RANGE)

#: nack outcomes, as the script returns them.
LATE, RETRIED, DELAYED, DEAD = 0, 1, 2, 3
#: screen outcomes, as the script returns them.
HANDLE, GIVEN_BACK, EXPIRED, RATE_LIMITED, GONE = 0, 1, 2, 3, -1

#: A queue's rate limit as the fetch scripts take it: (µs between handler
#: starts across the whole queue, its burst, the partitions the consumer
#: works); NO_RATE for a queue without one. Each partition keeps its share
#: (includes/rate.lua).
Rate = tuple[int, int, int]
NO_RATE: Rate = (0, 1, 1)


@dataclass(frozen=True)
class AckResult:
    acked: bool  # False: a late ack, the message had been reclaimed
    next_frame: Optional[bytes]
    registered: bool = True  # False: declared dead; stop using this identity
    paused: bool = False  # the queue is paused: nothing was taken
    #: Rate limit: µs to wait before starting next_frame (booked), or with
    #: none taken, before looking again; 0 otherwise.
    wait_us: int = 0


@dataclass(frozen=True)
class NackResult:
    outcome: int  # LATE, RETRIED, DELAYED or DEAD
    next_frame: Optional[bytes]
    registered: bool = True
    paused: bool = False
    wait_us: int = 0  # as AckResult's


@dataclass(frozen=True)
class TakeResult:
    registered: bool
    frames: tuple[bytes, ...]  # taken, in the order they must be handled
    paused: bool
    #: Rate limit: µs before each frame may start (booked), in its order.
    waits_us: tuple[int, ...] = ()
    #: Rate limit: nothing taken, none could start now: µs before looking again.
    retry_us: int = 0

    @property
    def next_frame(self) -> Optional[bytes]:
        return self.frames[0] if self.frames else None


@dataclass(frozen=True)
class ReclaimResult:
    requeued: int
    dead_lettered: int
    remaining: int


@dataclass(frozen=True)
class PromoteResult:
    moved: int
    wait_ms: int  # until the next delayed or scheduled message is due; -1: none
    expired: int = 0  # due, but past their ttl: dead-lettered


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


def _wait_of(reply: Any) -> int:
    """A wait the scripts computed, in µs: a Lua number arrives as an int
    (floats are truncated by Redis); anything else counts as 0."""
    return max(0, reply) if isinstance(reply, int) else 0


def _ack_result(reply: Sequence[Any]) -> AckResult:
    acked, nxt, registered, paused, wait = reply
    return AckResult(bool(acked), _frame_or_none(nxt), bool(registered), bool(paused), _wait_of(wait))


@functools.lru_cache(maxsize=256)
def _fetch_keys(keys: QueueKeys, consumer_id: str) -> tuple[str, ...]:
    """KEYS[1..9] of ack.lua and take.lua: what includes/fetch_next.lua needs
    (formed once per consumer: they are sent with every message)."""
    return (keys.processing(consumer_id), keys.pending, keys.counters, keys.consumers, keys.priority, keys.paused,
            keys.dead, keys.rate, keys.partitions)


def ack(keys: QueueKeys, consumer_id: str, frame: bytes, fetch_next: bool, count: bool = True,
        rate: Rate = NO_RATE) -> Call[AckResult]:
    """Remove ``frame`` from the consumer's list; take the next one if asked
    (booking its start under the queue's ``rate`` limit)."""
    return Call(_ACK, _fetch_keys(keys, consumer_id), (frame, int(fetch_next), consumer_id, int(count), *rate),
                _ack_result)


def _take_result(reply: Sequence[Any]) -> TakeResult:
    registered, paused, retry, *taken = reply
    return TakeResult(bool(registered), tuple(bytes(f) for f in taken[0::2]), bool(paused),
                      tuple(_wait_of(w) for w in taken[1::2]), _wait_of(retry))


#: Most frames one take call moves (take.lua caps ARGV[2] there too).
TAKE_MAX = 1000


def take(keys: QueueKeys, consumer_id: str, count: int = 1, rate: Rate = NO_RATE) -> Call[TakeResult]:
    """Take up to ``count`` ready frames (1 to TAKE_MAX) into the consumer's
    list without blocking, in the order they must be handled (each start
    booked under the queue's ``rate`` limit)."""
    return Call(_TAKE, _fetch_keys(keys, consumer_id), (consumer_id, max(1, min(count, TAKE_MAX)), *rate),
                _take_result)


def _screen_result(reply: Sequence[Any]) -> tuple[int, int]:
    verdict, wait = reply
    return int(verdict), _wait_of(wait)


def screen(keys: QueueKeys, consumer_id: str, frame: bytes, rate: Rate = NO_RATE) -> Call[tuple[int, int]]:
    """(HANDLE, GIVEN_BACK (queue paused), EXPIRED, RATE_LIMITED (given
    back) or GONE; µs to wait before the start or the next look) for a frame
    a blocking fetch just moved into the consumer's list."""
    return Call(_SCREEN, (keys.processing(consumer_id), keys.pending, keys.dead, keys.counters, keys.paused,
                          keys.rate, keys.partitions), (frame, *rate), _screen_result)


def _nack_result(reply: Sequence[Any]) -> NackResult:
    outcome, nxt, registered, paused, wait = reply
    return NackResult(int(outcome), _frame_or_none(nxt), bool(registered), bool(paused), _wait_of(wait))


def nack(keys: QueueKeys, consumer_id: str, frame: bytes, *, retry_threshold: int, delay_ms: int, meta: str,
         fetch_next: bool, dead_event: str = "", rate: Rate = NO_RATE) -> Call[NackResult]:
    """Count a failed attempt of ``frame``: retry, delay or dead-letter it
    (counting ``dead_event`` too, e.g. "rejected", when dead-lettered)."""
    return Call(_NACK, (keys.processing(consumer_id), keys.pending, keys.delayed, keys.dead, keys.counters,
                        keys.consumers, keys.priority, keys.priority_seq, keys.paused, keys.rate, keys.partitions),
                (frame, retry_threshold, max(0, int(delay_ms)), meta, int(fetch_next), consumer_id, dead_event,
                 *rate), _nack_result)


def _reclaim_result(reply: Sequence[Any]) -> ReclaimResult:
    requeued, dead, remaining = reply
    return ReclaimResult(int(requeued), int(dead), int(remaining))


def _with_lock(keys: list[str], args: list[Any], lock: Optional[Lock]) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of a script whose last key and argument are an optional
    lock and its token."""
    return (keys, args) if lock is None else ([*keys, lock[0]], [*args, lock[1]])


def _reclaim_keys(keys: QueueKeys, consumer_id: str) -> list[str]:
    """KEYS[1..7] of reclaim.lua and reclaim_stale.lua: the consumer's list,
    pending, dead, counters, the registry, heartbeats and retired."""
    return [keys.processing(consumer_id), keys.pending, keys.dead, keys.counters, keys.consumers, keys.heartbeats,
            keys.retired]


def reclaim(keys: QueueKeys, consumer_id: str, *, costs_attempt: bool, retry_threshold: int, reason: str,
            batch: int) -> Call[ReclaimResult]:
    """Return up to ``batch`` messages of a consumer that is gone to the
    queue (each one costing an attempt when ``costs_attempt``); unregister it
    once its list is empty. ``reason`` goes with any dead letter."""
    return Call(_RECLAIM, _reclaim_keys(keys, consumer_id),
                (int(costs_attempt), retry_threshold, meta_json(reason, consumer=consumer_id), batch, consumer_id),
                _reclaim_result)


def reclaim_stale(keys: QueueKeys, consumer_id: str, *, retry_threshold: int, reason: str, batch: int,
                  stale_after_ms: int, lock: Optional[Lock] = None) -> Call[ReclaimResult]:
    """Like a costly reclaim, only if the consumer's heartbeat is missing or
    older than ``stale_after_ms`` (``remaining`` -1 otherwise) and, with
    ``lock``, only if the lock holds its token (NOTLEADER otherwise)."""
    key_list, args = _with_lock(
        _reclaim_keys(keys, consumer_id),
        [retry_threshold, meta_json(reason, consumer=consumer_id), batch, consumer_id, stale_after_ms], lock)
    return Call(_RECLAIM_STALE, key_list, args, _reclaim_result)


def return_free(keys: QueueKeys, consumer_id: str, *, reason: str, batch: int,
                lock: Optional[Lock] = None) -> Call[ReclaimResult]:
    """Return up to ``batch`` messages of the consumer's list to the queue
    free of cost, registry untouched; with ``lock``, only if the lock holds
    its token (NOTLEADER otherwise)."""
    key_list, args = _with_lock([keys.processing(consumer_id), keys.pending, keys.dead, keys.counters],
                                [meta_json(reason, consumer=consumer_id), batch], lock)
    return Call(_RETURN_FREE, key_list, args, _reclaim_result)


def _promote_result(reply: Sequence[Any]) -> PromoteResult:
    moved, wait_ms, expired = reply
    return PromoteResult(int(moved), int(wait_ms), int(expired))


def promote(keys: QueueKeys, *, batch: int, lock: Optional[Lock] = None) -> Call[PromoteResult]:
    """Make due retries and scheduled messages ready, at most ``batch`` of them."""
    key_list, args = _with_lock([keys.delayed, keys.scheduled, keys.pending, keys.priority, keys.priority_seq,
                                 keys.dead, keys.counters], [batch], lock)
    return Call(_PROMOTE, key_list, args, _promote_result)


@dataclass(frozen=True)
class Options:
    """What publish_options.lua applies to every message of one call, in ms."""

    priority: int = 0
    delay_ms: int = -1  # -1: none
    at_ms: int = -1  # -1: none
    ttl_ms: int = 0  # 0: none
    dedup_ttl_ms: int = 86_400_000


def _dedup_index(key_list: list[str], keys: QueueKeys, dedup_key: Optional[str]) -> int:
    """The 1-based KEYS index of ``dedup_key``'s key, appended to ``key_list``
    (0 for none)."""
    if dedup_key is None:
        return 0
    key_list.append(keys.dedup(dedup_key))
    return len(key_list)


def _id_pairs(reply: Sequence[Any]) -> list[tuple[str, bool]]:
    return [(_escaped_texts([reply[i]])[0], bool(reply[i + 1])) for i in range(0, len(reply), 2)]


def publish_options(keys: QueueKeys, items: Sequence[tuple[str, bytes, Optional[str]]], options: Options,
                    count: bool = True) -> Call[list[tuple[str, bool]]]:
    """Publish (id, payload, dedup key or None) items with ``options``;
    per item (the id queued, True) or (the id holding its dedup key, False)."""
    key_list = [keys.pending, keys.counters, keys.priority, keys.priority_seq, keys.scheduled]
    args: list[Any] = [int(count), options.priority, options.delay_ms, options.at_ms, options.ttl_ms,
                       options.dedup_ttl_ms]
    for mid, payload, dedup_key in items:
        args += [mid, _dedup_index(key_list, keys, dedup_key), payload]
    return Call(_PUBLISH_OPTIONS, key_list, args, _id_pairs)


def remove(keys: QueueKeys, chosen: Sequence[tuple[str, bytes, str, Optional[str]]]) -> Call[list[bool]]:
    """Remove (where, frame, id, dedup key or None) waiting messages; per
    message whether it was still there."""
    key_list = [keys.pending, keys.priority, keys.scheduled, keys.delayed, keys.counters]
    args: list[Any] = []
    for where, frame, mid, dedup_key in chosen:
        args += [where, frame, mid, _dedup_index(key_list, keys, dedup_key)]
    return Call(_REMOVE, key_list, args, lambda reply: [bool(n) for n in reply])


def dlq_purge(keys: QueueKeys, dead_key: str, entries: Sequence[tuple[bytes, str, Optional[str]]]) -> Call[int]:
    """Delete (entry, message id, dedup key or None) dead letters from
    ``dead_key``, freeing their dedup keys; how many were there."""
    key_list = [dead_key]
    args: list[Any] = []
    for entry, mid, dedup_key in entries:
        args += [entry, mid, _dedup_index(key_list, keys, dedup_key)]
    return Call(_DLQ_PURGE, key_list, args, int)


def dlq_requeue(keys: QueueKeys, entries: Sequence[bytes]) -> Call[int]:
    """Move the given dead-letter entries back to pending, attempts reset
    (call with at least one entry)."""
    return Call(_DLQ_REQUEUE, (keys.dead, keys.pending, keys.counters, keys.priority, keys.priority_seq), entries,
                int)


def heartbeat(keys: QueueKeys, beats: Sequence[tuple[str, str]], *, register: bool) -> Call[list[str]]:
    """Register or renew consumers (id, info JSON); the ids that are no
    longer registered (declared dead)."""
    args: list[Any] = [int(register)]
    for cid, info in beats:
        args += [cid, info]
    return Call(_HEARTBEAT, (keys.consumers, keys.heartbeats), args, _escaped_texts)


def stale(keys: QueueKeys, *, timeout_ms: int, limit: int) -> Call[tuple[list[str], list[str]]]:
    """(stale ids, orphan ids) of a queue's consumers, by the Redis clock."""
    return Call(_STALE, (keys.heartbeats, keys.consumers), (timeout_ms, limit), _stale_result)


def _stale_result(reply: Sequence[Any]) -> tuple[list[str], list[str]]:
    stale_ids, orphans = reply
    return _texts(stale_ids), _texts(orphans)


def _texts(items: Sequence[Any]) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in items]


def _escaped_texts(items: Sequence[Any]) -> list[str]:
    """Texts, bytes that are not UTF-8 kept as escapes."""
    return [x.decode("utf-8", "backslashreplace") if isinstance(x, bytes) else str(x) for x in items]


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


def publish(keys: QueueKeys, frames: Sequence[bytes], count: bool = True) -> Call[int]:
    """LPUSH ``frames`` (oldest first) and count them; the pending length after."""
    return Call(_PUBLISH, (keys.pending, keys.counters), (int(count), *frames), int)


def partitions(keys: QueueKeys, count: int) -> Call[int]:
    """Declare ``count`` partitions of the queue; the count stored (the larger)."""
    return Call(_PARTITIONS, (keys.partitions,), (count, defaults.PARTITIONS_MAX), int)


def producer_stats(namespace: str, producer_id: str, info: str, forget_after_ms: int) -> Call[int]:
    """Record one producer's statistics (JSON); forget producers silent for
    ``forget_after_ms``; how many were forgotten."""
    return Call(_PRODUCER_STATS, (producers_hash(namespace), producers_seen(namespace)),
                (producer_id, info, forget_after_ms), int)


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


def _bytes_or_none(reply: Any) -> Optional[bytes]:
    """Bytes, or None for Lua's false."""
    return None if reply is None or reply is False else bytes(reply)


def _peeked(reply: Sequence[Any]) -> tuple[str, int, list[Peeked]]:
    found, whole, *flat = reply
    elements = []
    for size, data, after, score, digest in zip(*[iter(flat)] * 5):
        score_text, digest_text = _bytes_or_none(score), _bytes_or_none(digest)
        elements.append(Peeked(int(size), bytes(data), _bytes_or_none(after),
                               None if score_text is None else float(score_text),
                               None if digest_text is None else digest_text.decode("ascii")))
    return _escaped_texts([found])[0], int(whole), elements


def peek_range(key: str, kind: str, first: int, step: int, count: int, budget: ReadBudget,
               split: bytes = b"") -> Call[tuple[str, int, list[Peeked]]]:
    """Read up to ``count`` elements of the list or sorted set ``key``
    (``kind``: "list" or "zset") from index ``first`` by ``step`` within
    ``budget`` (``split``: the separator after which a cut element's second
    head starts); (the key's type, the whole budget left, the elements). A
    key of another type reads nothing."""
    return Call(_PEEK_RANGE, (key,), (kind, first, step, count, budget.head, budget.whole, split), _peeked)
