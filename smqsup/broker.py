"""Thin adapter between smqsup and Redis: typed calls for each operation,
every one wrapped so that redis-py errors become smqsup errors; the
connection itself is connection.py's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, cast

import redis.exceptions as rexc

from smqsup import defaults, scripts
from smqsup.connection import HotLine, check_server, connect, send, wrapped
from smqsup.errors import BrokerError, PushRefused
from smqsup.info import ConsumerInfo
from smqsup.keys import QueueKeys, producers_hash, queues_set
from smqsup.logs import warn_once

log = logging.getLogger(__name__)

#: Most frames one publish script call pushes (publish_many sends several
#: calls in one pipelined round trip).
PUBLISH_CHUNK = 1000
#: Producers silent this long drop out of the statistics, in ms.
_PRODUCER_TTL_MS = 600_000


def _text(value: "bytes | str") -> str:
    """Redis bytes as text; bytes that are not UTF-8 are kept as escapes."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def redis_int(value: "bytes | str | None") -> Optional[int]:
    """A Redis integer (HINCRBY's text), or None for anything else: anyone
    with access may have written anything in a counters hash."""
    text = (value.decode("utf-8", "replace") if isinstance(value, bytes) else value or "").strip()
    digits = text[1:] if text[:1] == "-" else text
    return int(text) if digits.isascii() and digits.isdigit() and len(digits) <= 19 else None


def _int_fields(raw: Mapping[Any, Any]) -> dict[str, int]:
    """A hash of counters as ints; a field that holds no integer is left out."""
    return {_text(field): n for field, value in raw.items() if (n := redis_int(value)) is not None}


def _check_queued(queue: str, chunks: Sequence[Sequence[bytes]], replies: Sequence[Any]) -> None:
    """Raise PushRefused, saying which messages were queued, if Redis refused
    any of the publish calls (one reply per chunk)."""
    queued = [not isinstance(reply, Exception) for reply, chunk in zip(replies, chunks) for _ in chunk]
    refusal = next((reply for reply in replies if isinstance(reply, Exception)), None)
    if refusal is not None:
        raise PushRefused(f"publish to {queue!r}: Redis refused {queued.count(False)} of {len(queued)} "
                          f"message(s): {refusal}", queued)


def _ms(time_reply: Sequence[Any]) -> int:
    """TIME's (seconds, microseconds) as whole ms."""
    secs, usecs = time_reply
    return int(secs) * 1000 + int(usecs) // 1000


@dataclass(frozen=True)
class QueueReading:
    """One queue as the statistics read it: sizes counted, the rest as stored
    (anyone with access may write anything there: stats.py trusts none of it)."""

    sizes: dict[str, int]  # pending, processing, delayed, dead
    held: list[int]  # the processing list length of each registered consumer, in the order of ``consumers``
    counters: dict[bytes, bytes]
    consumers: dict[bytes, bytes]  # consumer id -> what its last heartbeat said (JSON)
    heartbeats: list[tuple[bytes, float]]  # consumer id, ms (Redis clock)
    leader: Optional[bytes]  # the collector lock's token
    gc: dict[bytes, bytes]  # collector facts
    slots: dict[bytes, bytes]  # consumer slot -> restarts and last exit (JSON)
    recent: list[bytes]  # the latest history points (JSON), newest first


def _ask_sizes(pipe: Any, k: QueueKeys) -> None:
    """Queue the three size reads (pending, delayed, dead) for _sizes: every size reader goes here."""
    pipe.llen(k.pending)
    pipe.zcard(k.delayed)
    pipe.llen(k.dead)


def _sizes(replies: Sequence[Any]) -> dict[str, int]:
    pending, delayed, dead = replies
    return {"pending": int(pending), "delayed": int(delayed), "dead": int(dead)}


def _ask_reading(pipe: Any, k: QueueKeys, recent: int) -> None:
    """Queue the reads of a QueueReading but its consumers' list lengths
    (nine replies, ten with ``recent`` points, read by _reading)."""
    _ask_sizes(pipe, k)
    for key in (k.counters, k.consumers):
        pipe.hgetall(key)
    pipe.zrange(k.heartbeats, 0, -1, withscores=True)
    pipe.get(k.gc_lock)
    for key in (k.gc, k.slots):
        pipe.hgetall(key)
    if recent > 0:
        pipe.lrange(k.series, 0, recent - 1)


def _reading(replies: Sequence[Any], held: Iterator[Any]) -> QueueReading:
    """A QueueReading from _ask_reading's replies, its consumers' list
    lengths taken from ``held`` in the order of its consumers."""
    counters, consumers, beats, leader, gc, slots, *recent = replies[3:]
    lengths = [int(next(held)) for _ in consumers]
    return QueueReading({**_sizes(replies[:3]), "processing": sum(lengths)}, lengths, counters, consumers, beats,
                        leader, gc, slots, recent[0] if recent else [])


class Broker:
    """Redis operations of one namespace. One instance per process: never
    share a Broker (its sockets) across fork."""

    def __init__(self, url: str, namespace: str = defaults.NAMESPACE, *, client_name: Optional[str] = None,
                 socket_timeout_s: float = defaults.SOCKET_TIMEOUT_S, stats: bool = True) -> None:
        self.url = url
        self.namespace = namespace
        #: Count published and acked messages in the queue counters (scripts).
        self.stats = stats
        self.client = connect(url, client_name=client_name, socket_timeout_s=socket_timeout_s)
        self._hot = HotLine(self.client)
        self._keys: dict[str, QueueKeys] = {}
        #: Most messages one reclaim script call moves (the reclaims loop over batches).
        self.reclaim_batch = defaults.RECLAIM_BATCH

    def keys(self, queue: str) -> QueueKeys:
        k = self._keys.get(queue)
        if k is None:
            k = self._keys[queue] = QueueKeys(self.namespace, queue)
        return k

    def close(self) -> None:
        self._hot.close()
        self.client.close()

    # --- server ------------------------------------------------------------

    def ping(self) -> None:
        with wrapped("PING"):
            self.client.ping()

    def check_server(self) -> list[str]:
        """connection.check_server() on this broker's Redis."""
        return check_server(self.client)

    def shutdown_server(self) -> None:
        """SHUTDOWN the Redis server (an embedded one, at its owner's stop)."""
        with wrapped("SHUTDOWN"):
            self.client.shutdown()

    # --- producing -----------------------------------------------------------

    def push(self, queue: str, frames: Sequence[bytes], *, register: bool,
             producer: Optional[tuple[str, str]] = None) -> None:
        """Queue ``frames`` (publish.lua: LPUSH and count, up to PUBLISH_CHUNK
        frames a call) in one round trip, with SADD of the queue name when
        ``register`` and the producer's statistics (id, JSON) when given.
        Raises PushRefused if Redis refused messages (saying which were
        queued), BrokerConnectionError if the outcome is unknown."""
        if not register and producer is None and len(frames) <= PUBLISH_CHUNK:
            self._push_alone(queue, frames)
            return
        batch = scripts.Batch(self.client)
        # What each call that does not queue messages is, for the log.
        bookkeeping: dict[int, str] = {}
        if register:
            bookkeeping[len(batch)] = "queue registry"
            batch.command("SADD", queues_set(self.namespace), queue)
        first_chunk = len(batch)
        chunks = [frames[start:start + PUBLISH_CHUNK] for start in range(0, len(frames), PUBLISH_CHUNK)]
        for chunk in chunks:
            batch.add(scripts.publish(self.keys(queue), chunk, self.stats))
        if producer is not None:
            bookkeeping[len(batch)] = "producer statistics"
            batch.add(scripts.producer_stats(self.namespace, producer[0], producer[1], _PRODUCER_TTL_MS))
        with wrapped(f"publish to {queue!r}"):
            results = send(self.client, batch)
        _check_queued(queue, chunks, results[first_chunk:first_chunk + len(chunks)])
        # The messages are queued: a refused registry entry or statistics flush
        # (OOM, an ACL NOPERM) must not turn that into an error.
        for i, what in bookkeeping.items():
            if isinstance(results[i], Exception):
                warn_once(log, f"refused:{what}", "publish to %r: messages queued, but Redis refused the %s "
                          "(said once; later refusals at debug level): %s", queue, what, results[i])

    def _push_alone(self, queue: str, frames: Sequence[bytes]) -> None:
        """push() of one chunk and nothing else: one script call on the held connection."""
        with wrapped(f"publish to {queue!r}"):
            try:
                scripts.publish(self.keys(queue), frames, self.stats).run(self._hot)
            except rexc.ResponseError as exc:  # refused before it wrote anything
                raise PushRefused(f"publish to {queue!r}: Redis refused it: {exc}", [False] * len(frames)) from exc

    def producer_stats(self, producer_id: str, info: str) -> None:
        """Flush one producer's statistics on their own (at close)."""
        with wrapped("producer statistics"):
            scripts.producer_stats(self.namespace, producer_id, info, _PRODUCER_TTL_MS).run(self.client)

    # --- consuming -----------------------------------------------------------

    def fetch(self, queue: str, consumer_id: str, block_s: float) -> Optional[bytes]:
        """BLMOVE the oldest pending frame into the consumer's list; None on timeout."""
        k = self.keys(queue)
        with wrapped(f"fetch from {queue!r}"):
            try:
                frame = self._hot.execute("BLMOVE", k.pending, k.processing(consumer_id), "RIGHT", "LEFT", block_s)
            except rexc.ResponseError as exc:
                if "unknown command" not in str(exc).lower():
                    raise
                # INFO may have been refused at start, so nobody has checked the version.
                raise BrokerError(f"fetch from {queue!r}: Redis has no BLMOVE ({exc}): smqsup needs "
                                  f"Redis >= 6.2") from exc
        return cast(Optional[bytes], frame)

    def ack(self, queue: str, consumer_id: str, frame: bytes, fetch_next: bool) -> scripts.AckResult:
        with wrapped(f"ack on {queue!r}"):
            return scripts.ack(self.keys(queue), consumer_id, frame, fetch_next, self.stats).run(self._hot)

    def nack(self, queue: str, consumer_id: str, frame: bytes, *, retry_threshold: int, delay_ms: int,
             meta: str, fetch_next: bool) -> scripts.NackResult:
        with wrapped(f"nack on {queue!r}"):
            return scripts.nack(self.keys(queue), consumer_id, frame, retry_threshold=retry_threshold,
                                delay_ms=delay_ms, meta=meta, fetch_next=fetch_next).run(self._hot)

    def reclaim_dead(self, queue: str, consumer_id: str, *, retry_threshold: int,
                     reason: str) -> scripts.ReclaimResult:
        """Return a dead consumer's list to the queue, each message costing an
        attempt (dead-lettered past ``retry_threshold``); unregister the
        consumer (registry, heartbeat, dated in retired) once its list is empty."""
        return self._drain(queue, scripts.reclaim(self.keys(queue), consumer_id, costs_attempt=True,
                                                  retry_threshold=retry_threshold, reason=reason,
                                                  batch=self.reclaim_batch))

    def return_stopped(self, queue: str, consumer_id: str, *, reason: str) -> scripts.ReclaimResult:
        """Return the list of a consumer whose stop was asked for (or that
        re-registers under a new id) to the queue, free of cost; unregister it
        once its list is empty, as reclaim_dead does."""
        return self._drain(queue, scripts.reclaim(self.keys(queue), consumer_id, costs_attempt=False,
                                                  retry_threshold=0, reason=reason,
                                                  batch=self.reclaim_batch))

    def reclaim_stale(self, queue: str, consumer_id: str, *, retry_threshold: int, reason: str,
                      stale_after_ms: int, lock: Optional[scripts.Lock] = None) -> scripts.ReclaimResult:
        """Reclaim as reclaim_dead does, for a consumer whose heartbeat is
        stale: only if its heartbeat is still missing or older than
        ``stale_after_ms`` (else nothing is done and ``remaining`` is -1).
        With ``lock``, raise NotLeader unless the lock holds its token."""
        return self._drain(queue, scripts.reclaim_stale(self.keys(queue), consumer_id, retry_threshold=retry_threshold,
                                                        reason=reason, batch=self.reclaim_batch,
                                                        stale_after_ms=stale_after_ms, lock=lock))

    def sweep_retired(self, queue: str, consumer_id: str, *, lock: scripts.Lock) -> scripts.ReclaimResult:
        """Return, free of cost, the messages found in a retired consumer's
        list; the registry is not touched. Raise NotLeader unless the lock
        holds its token."""
        return self._drain(queue, scripts.return_free(self.keys(queue), consumer_id,
                                                      reason="found in a retired consumer's list",
                                                      batch=self.reclaim_batch, lock=lock))

    def return_held(self, queue: str, consumer_id: str, *, reason: str) -> scripts.ReclaimResult:
        """Return, free of cost, what a supervised consumer still holds as it
        stops on its own; the registry is not touched (its supervisor
        unregisters it when it reaps it)."""
        return self._drain(queue, scripts.return_free(self.keys(queue), consumer_id, reason=reason,
                                                      batch=self.reclaim_batch))

    def _drain(self, queue: str, call: scripts.Call[scripts.ReclaimResult]) -> scripts.ReclaimResult:
        """Run a reclaim script call batch after batch until the list is empty
        (or the script did nothing: remaining -1); the sums of what moved."""
        requeued = dead = 0
        with wrapped(f"reclaim on {queue!r}"):
            while True:
                r = call.run(self.client)
                requeued += r.requeued
                dead += r.dead_lettered
                if r.remaining <= 0:
                    return scripts.ReclaimResult(requeued, dead, r.remaining)

    def promote(self, queue: str, *, lock: Optional[scripts.Lock] = None,
                batch: int = defaults.PROMOTE_BATCH) -> scripts.PromoteResult:
        with wrapped(f"promote on {queue!r}"):
            return scripts.promote(self.keys(queue), batch=batch, lock=lock).run(self.client)

    def processing(self, queue: str, consumer_id: str) -> list[bytes]:
        """The frames in the consumer's list, oldest first."""
        with wrapped(f"read processing list of {queue!r}"):
            frames = cast(list[bytes], self.client.lrange(self.keys(queue).processing(consumer_id), 0, -1))
        return frames[::-1]

    def register_consumer(self, queue: str, consumer_id: str, info: ConsumerInfo) -> None:
        """Enter the consumer in the registry with a first heartbeat."""
        with wrapped(f"register consumer on {queue!r}"):
            self.client.sadd(queues_set(self.namespace), queue)
            scripts.heartbeat(self.keys(queue), [(consumer_id, info.to_json())], register=True).run(self.client)

    def heartbeat(self, beats: Mapping[str, Sequence[tuple[str, ConsumerInfo]]]
                  ) -> tuple[list[tuple[str, str]], dict[str, str]]:
        """Renew the heartbeats of registered consumers, queue -> [(id, info)],
        all queues in one pipelined round trip. Returns (queue, id) of those no
        longer registered (declared dead, they must not go on), and queue ->
        error text for the queues whose renewal Redis refused (OOM, a key of
        the wrong type): one queue's refusal is not the others'. Raises
        BrokerConnectionError if Redis could not be reached."""
        items = [(q, b) for q, b in beats.items() if b]
        if not items:
            return [], {}
        batch = scripts.Batch(self.client)
        for queue, queue_beats in items:
            batch.add(scripts.heartbeat(self.keys(queue), [(cid, info.to_json()) for cid, info in queue_beats],
                                        register=False))
        with wrapped("heartbeat"):
            replies = send(self.client, batch)
        refused = {q: f"heartbeat: Redis error: {r}" for (q, _), r in zip(items, replies) if isinstance(r, Exception)}
        lost = [(q, cid) for (q, _), unknown in zip(items, replies) if q not in refused for cid in unknown]
        return lost, refused

    def stale_consumers(self, queue: str, timeout_ms: int, limit: int = 100) -> tuple[list[str], list[str]]:
        """(stale, orphan) consumer ids of the queue, judged by the Redis clock."""
        with wrapped(f"find stale consumers of {queue!r}"):
            return scripts.stale(self.keys(queue), timeout_ms=timeout_ms, limit=limit).run(self.client)

    # --- leader lock ---------------------------------------------------------

    def lock_acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        """SET NX PX; a key found there with no time to live (nobody's lock:
        garbage) is given ``ttl_ms`` to live, and said once."""
        with wrapped(f"acquire {key}"):
            got = scripts.lock_acquire(key, token, ttl_ms).run(self.client)
        if got < 0:
            log.warning("%s held a value that never expires (not a lock of ours); it now expires in %d ms and "
                        "the election resumes then", key, ttl_ms)
        return got > 0

    def lock_renew(self, key: str, token: str, ttl_ms: int) -> bool:
        with wrapped(f"renew {key}"):
            return scripts.lock_renew(key, token, ttl_ms).run(self.client)

    def lock_release(self, key: str, token: str) -> bool:
        with wrapped(f"release {key}"):
            return scripts.lock_release(key, token).run(self.client)

    def lock_holder(self, key: str) -> Optional[str]:
        with wrapped(f"read {key}"):
            value = self.client.get(key)
        return None if value is None else _text(cast(bytes, value))

    def record_slot(self, queue: str, slot: str, info: Mapping[str, Any]) -> None:
        """Restarts and last exit of a consumer slot (its supervisor writes)."""
        with wrapped(f"slot statistics of {queue!r}"):
            self.client.hset(self.keys(queue).slots, slot, json.dumps(dict(info), separators=(",", ":")))

    def gc_fact(self, queue: str, **increments: int) -> None:
        """Add to the queue's collector facts (reclaims, orphans, ...)."""
        k = self.keys(queue)
        with wrapped(f"collector facts of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            for name, n in increments.items():
                pipe.hincrby(k.gc, name, n)
            pipe.execute()

    def gc_facts(self, queue: str) -> dict[str, int]:
        with wrapped(f"collector facts of {queue!r}"):
            return _int_fields(self.client.hgetall(self.keys(queue).gc))

    def is_registered(self, queue: str, consumer_id: str) -> bool:
        """Whether the consumer is still in the registry (not declared dead)."""
        with wrapped(f"registry of {queue!r}"):
            return bool(self._hot.execute("HEXISTS", self.keys(queue).consumers, consumer_id))

    def count_late_ack(self, queue: str) -> None:
        """Count a late ack found after a reconnect (the ack script counts the others)."""
        with wrapped(f"counters of {queue!r}"):
            self.client.hincrby(self.keys(queue).counters, "late_acks", 1)

    def retired_with_messages(self, queue: str, watch_ms: int,
                              most: int = defaults.RETIRED_SWEEP_MAX) -> list[str]:
        """Consumers unregistered less than ``watch_ms`` ago whose processing
        list is not empty, among the ``most`` latest; older retirees are
        forgotten, and so are entries dated more than ``watch_ms`` ahead (no
        clock wrote those: junk, which would otherwise stay for ever)."""
        k = self.keys(queue)
        with wrapped(f"retired consumers of {queue!r}"):
            now_ms = _ms(self.client.time())
            pipe = self.client.pipeline(transaction=False)
            pipe.zremrangebyscore(k.retired, "-inf", f"({now_ms - watch_ms}")
            pipe.zremrangebyscore(k.retired, f"({now_ms + watch_ms}", "+inf")
            # The latest first: a late message reaches a list within seconds of its retirement.
            pipe.zrevrangebyscore(k.retired, now_ms + watch_ms, now_ms - watch_ms, start=0, num=most)
            ids = [_text(cid) for cid in pipe.execute()[-1]]
            pipe = self.client.pipeline(transaction=False)
            for cid in ids:
                pipe.llen(k.processing(cid))
            lengths = pipe.execute() if ids else []
        return [cid for cid, n in zip(ids, lengths) if n]

    def consumers(self, queue: str) -> dict[str, ConsumerInfo]:
        """The queue's registry: consumer id -> what its last heartbeat said
        (fields that cannot be read keep their defaults)."""
        with wrapped(f"read consumers of {queue!r}"):
            raw = self.client.hgetall(self.keys(queue).consumers)
        return {_text(k): ConsumerInfo.from_json(v) for k, v in raw.items()}

    # --- inspecting ----------------------------------------------------------

    def sizes(self, queue: str) -> dict[str, int]:
        """Pending, delayed and dead-letter counts of the queue, one round trip."""
        with wrapped(f"sizes of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            _ask_sizes(pipe, self.keys(queue))
            return _sizes(pipe.execute())

    def read_queues(self, queues: Sequence[str], *, recent: int = 0) -> tuple[int, dict[str, QueueReading]]:
        """The Redis clock (ms) and, for each queue, what the statistics read
        of it, with its ``recent`` latest history points: all queues in two
        round trips (the second reads the registered consumers' lists)."""
        asked = 9 + (recent > 0)
        with wrapped("read queue statistics"):
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            for queue in queues:
                _ask_reading(pipe, self.keys(queue), recent)
            now, *replies = pipe.execute()
            per_queue = [replies[i:i + asked] for i in range(0, len(replies), asked)]
            pipe = self.client.pipeline(transaction=False)
            for queue, r in zip(queues, per_queue):
                for cid in r[4]:
                    pipe.llen(self.keys(queue).processing(cid.decode("utf-8", "replace")))
            held = iter(pipe.execute())
        return _ms(now), {queue: _reading(r, held) for queue, r in zip(queues, per_queue)}

    def append_point(self, queue: str, point: str, keep: int) -> None:
        """Add one point (JSON) to the queue's history, keeping the ``keep`` latest."""
        k = self.keys(queue)
        with wrapped(f"history of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(k.series, point)
            pipe.ltrim(k.series, 0, keep - 1)
            pipe.execute()

    def series(self, queue: str, points: int) -> list[bytes]:
        """The queue's ``points`` latest history points (JSON), newest first."""
        with wrapped(f"history of {queue!r}"):
            return cast(list[bytes], self.client.lrange(self.keys(queue).series, 0, max(0, points - 1)))

    def producers(self) -> dict[bytes, bytes]:
        """Every producer's statistics as stored: id -> JSON."""
        with wrapped("producers"):
            return cast(dict[bytes, bytes], self.client.hgetall(producers_hash(self.namespace)))

    def counters(self, queue: str) -> dict[str, int]:
        with wrapped(f"counters of {queue!r}"):
            return _int_fields(self.client.hgetall(self.keys(queue).counters))

    def known_queues(self) -> list[str]:
        with wrapped("list queues"):
            names = cast(set[bytes], self.client.smembers(queues_set(self.namespace)))
        # Anyone can SADD there: a name that is not UTF-8 comes back with U+FFFD.
        return sorted(q.decode("utf-8", "replace") for q in names)

    # --- dead letters --------------------------------------------------------

    def dead_letters(self, queue: str, start: int = 0, count: int = 100) -> list[bytes]:
        """Dead-letter entries, newest first."""
        with wrapped(f"read dead letters of {queue!r}"):
            return cast(list[bytes], self.client.lrange(self.keys(queue).dead, start, start + count - 1))

    def dlq_requeue(self, queue: str, entries: Sequence[bytes]) -> int:
        if not entries:
            return 0
        with wrapped(f"requeue dead letters of {queue!r}"):
            return scripts.dlq_requeue(self.keys(queue), entries).run(self.client)

    def dlq_remove(self, queue: str, entries: Sequence[bytes]) -> int:
        """Delete the given dead-letter entries; returns how many were there."""
        k = self.keys(queue)
        with wrapped(f"purge dead letters of {queue!r}"):
            pipe = self.client.pipeline(transaction=True)
            for e in entries:
                pipe.lrem(k.dead, 1, e)  # type: ignore[arg-type]
            return sum(int(n) for n in pipe.execute())

    def dlq_purge(self, queue: str) -> int:
        """Delete the whole dead-letter list; returns how many entries it held."""
        k = self.keys(queue)
        with wrapped(f"purge dead letters of {queue!r}"):
            pipe = self.client.pipeline(transaction=True)
            pipe.llen(k.dead)
            pipe.delete(k.dead)
            n, _ = pipe.execute()
        return int(n)
