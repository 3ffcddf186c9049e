"""Thin adapter between smqsup and Redis: one configured client, typed calls,
and the boundary where redis-py errors become smqsup errors.

Client configuration (DESIGN section 8): redis-py retries commands after a
connection error by default. A silent re-send of BLMOVE, an ack script or a
publish can strand or duplicate a message, so every client made here has
retries switched off; callers find out what happened from Redis state instead.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Optional, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.exceptions as rexc
from redis.backoff import NoBackoff
from redis.retry import Retry

from smqsup import defaults, scripts
from smqsup.errors import BrokerConnectionError, BrokerError, BrokerNotSent, ConfigError, NotLeader, PushRefused
from smqsup.keys import QueueKeys, producers_hash, producers_seen, queues_set

log = logging.getLogger(__name__)

#: Most frames one publish script call pushes (publish_many sends several
#: calls in one pipelined round trip).
PUBLISH_CHUNK = 1000
#: Producers silent this long drop out of the statistics, in ms.
_PRODUCER_TTL_MS = 600_000

#: Lowest Redis version with BLMOVE/LMOVE.
MIN_REDIS_VERSION = (6, 2, 0)


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


def connect(
    url: str,
    *,
    socket_timeout_s: float = defaults.SOCKET_TIMEOUT_S,
    connect_timeout_s: float = defaults.CONNECT_TIMEOUT_S,
    client_name: Optional[str] = None,
) -> "redis.Redis":
    """A redis-py client for ``url`` (redis://, rediss://, unix://, sentinel://)
    with automatic retries disabled. Connects lazily."""
    options: dict[str, Any] = {
        "retry": _no_retry(),
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": connect_timeout_s,
        "client_name": client_name,
        "health_check_interval": 0,
    }
    if url.startswith("sentinel://"):
        return _connect_sentinel(url, options)
    if not url.startswith("unix://"):
        options["socket_keepalive"] = True  # TCP only: notice a dead peer
    try:
        return redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise ConfigError(f"redis.url: {exc}, got {url!r}") from None


def _connect_sentinel(url: str, options: dict[str, Any]) -> "redis.Redis":
    """``sentinel://[:password@]host:port[,host:port...]/service[/db]``."""
    from redis.sentinel import Sentinel

    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    password = unquote(parts.password) if parts.password else None
    hosts = []
    for item in netloc.split(","):
        host, _, port = item.rpartition(":")
        hosts.append((host or item, int(port) if port.isdigit() else 26379))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ConfigError(f"redis.url: sentinel url needs a service name, got {url!r}")
    db = int(path[1]) if len(path) > 1 else int(parse_qs(parts.query).get("db", ["0"])[0])
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        hosts, sentinel_kwargs={"socket_timeout": options["socket_connect_timeout"]}, **options)
    master = sentinel.master_for(path[0], db=db, password=password)  # type: ignore[no-untyped-call]
    return cast("redis.Redis", master)


def _text(value: "bytes | str") -> str:
    return value.decode() if isinstance(value, bytes) else value


def _json(info: Mapping[str, Any]) -> str:
    return json.dumps(dict(info), separators=(",", ":"))


@contextmanager
def wrapped(what: str) -> Iterator[None]:
    """Turn redis-py errors raised inside the block into smqsup errors."""
    try:
        yield
    except _NotSent as exc:
        raise BrokerNotSent(f"{what}: Redis unreachable, nothing sent: {exc}") from exc
    except (TimeoutError, rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
        raise BrokerConnectionError(f"{what}: Redis connection failed: {exc}") from exc
    except rexc.ResponseError as exc:
        if str(exc).startswith("NOTLEADER"):
            raise NotLeader(f"{what}: refused, this process no longer holds the collector lock") from exc
        raise BrokerError(f"{what}: Redis error: {exc}") from exc
    except rexc.RedisError as exc:
        raise BrokerError(f"{what}: Redis error: {exc}") from exc


class _NotSent(rexc.ConnectionError):
    """Raised by _HotLine when the command never left this process."""


def _closed(conn: Any) -> bool:
    """Whether an idle connection has anything to read: with no request in
    flight that can only be the server's close (or an error)."""
    try:
        return bool(conn.can_read(0))
    except (rexc.ConnectionError, rexc.TimeoutError, OSError):
        return True


class _HotLine:
    """A connection held per thread for the per-message commands (BLMOVE, the
    ack/nack scripts, a single publish). It bypasses the pool checkout and
    redis-py's command machinery on every call, which cost more CPU than
    Redis itself here, and like every client made here it never retries.
    redis-py disconnects it on any error; the next call connects again. Each
    thread gets its own (thread-safe without a lock); never used across fork."""

    def __init__(self, client: "redis.Redis") -> None:
        self._pool = client.connection_pool
        self._local = threading.local()

    def execute(self, *args: Any) -> Any:
        """Send one command and read its reply. Raises _NotSent if Redis could
        not be reached before sending (the command certainly did not run)."""
        local = self._local
        conn: Any = None
        try:
            conn = getattr(local, "conn", None)
            if conn is None or local.pid != os.getpid():
                conn = local.conn = self._pool.get_connection()
                local.pid = os.getpid()
            elif _closed(conn):
                # The server closed this idle connection (a restart): reconnect
                # now rather than send into it and be left not knowing whether
                # the command ran.
                conn.disconnect()
            conn.connect()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            if conn is not None:
                conn.disconnect()
            raise _NotSent(str(exc)) from exc
        conn.send_command(*args)
        return conn.read_response()

    # The two methods scripts.Script calls.
    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute("EVALSHA", sha, numkeys, *keys_and_args)

    def eval(self, text: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute("EVAL", text, numkeys, *keys_and_args)

    def close(self) -> None:
        """Return this thread's connection (client.close() closes the others)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.disconnect()
            self._pool.release(conn)
        self._local.conn = None


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
        self._hot = _HotLine(self.client)
        self._keys: dict[str, QueueKeys] = {}

    @property
    def producers_key(self) -> str:
        return producers_hash(self.namespace)

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
        """Raise BrokerError if Redis is too old; return warnings for people
        (e.g. a maxmemory-policy that may evict messages)."""
        with wrapped("INFO"):
            info = self.client.info("server")
            version = tuple(int(x) for x in str(info["redis_version"]).split(".")[:3])
            try:
                policy = self.client.config_get("maxmemory-policy").get("maxmemory-policy", "noeviction")
            except rexc.ResponseError:  # CONFIG disabled (managed Redis): cannot tell
                policy = "noeviction"
        if version < MIN_REDIS_VERSION:
            raise BrokerError(f"Redis {info['redis_version']} is too old: smqsup needs Redis >= 6.2 (BLMOVE)")
        if policy != "noeviction":
            return [f"Redis maxmemory-policy is {policy!r}: Redis may evict queued messages; set it to 'noeviction'"]
        return []

    # --- producing -----------------------------------------------------------

    def push(self, queue: str, frames: Sequence[bytes], *, register: bool,
             producer: Optional[tuple[str, str]] = None) -> None:
        """Queue ``frames`` (publish.lua: LPUSH and count, up to PUBLISH_CHUNK
        frames a call) in one round trip, with SADD of the queue name when
        ``register`` and the producer's statistics (id, JSON) when given.
        Raises BrokerConnectionError if the outcome is unknown."""
        k = self.keys(queue)
        with wrapped(f"publish to {queue!r}"):
            if not register and producer is None and len(frames) <= PUBLISH_CHUNK:
                try:
                    scripts.publish(self._hot, k, frames, self.stats)
                except rexc.ResponseError as exc:  # refused before it wrote anything
                    raise PushRefused(f"publish to {queue!r}: Redis refused it: {exc}", [False] * len(frames)) \
                        from exc
                return
            calls: list[tuple[Optional[scripts.Script], tuple[Any, ...]]] = []
            if register:
                calls.append((None, ("SADD", queues_set(self.namespace), queue)))
            first_chunk = len(calls)
            for start in range(0, len(frames), PUBLISH_CHUNK):
                calls.append((scripts.PUBLISH, (2, k.pending, k.counters, int(self.stats),
                                                *frames[start:start + PUBLISH_CHUNK])))
            if producer is not None:
                calls.append((scripts.PRODUCER_STATS, (2, producers_hash(self.namespace),
                                                       producers_seen(self.namespace), producer[0], producer[1],
                                                       _PRODUCER_TTL_MS)))
            results = self._pipeline(calls, raise_errors=False)
        queued: list[bool] = []
        refusal: Optional[Exception] = None
        for n, start in enumerate(range(0, len(frames), PUBLISH_CHUNK)):
            result = results[first_chunk + n]
            ok = not isinstance(result, Exception)
            refusal = refusal or (None if ok else result)
            queued += [ok] * len(frames[start:start + PUBLISH_CHUNK])
        if refusal is not None:
            raise PushRefused(f"publish to {queue!r}: Redis refused {queued.count(False)} of {len(frames)} "
                              f"message(s): {refusal}", queued)
        for result in results:
            if isinstance(result, Exception):  # the queue-name SADD or the statistics: not the messages
                log.warning("publish to %r: a bookkeeping command failed: %s", queue, result)

    def _pipeline(self, calls: Sequence[tuple[Optional[scripts.Script], tuple[Any, ...]]], *,
                  raise_errors: bool = True) -> list[Any]:
        """Send plain commands and scripts (by SHA) in one round trip. A script
        the server does not know (NOSCRIPT: it did not run) is sent again alone
        by its text; nothing that ran is ever sent twice. Other error replies
        are raised, or left in the results when ``raise_errors`` is false."""
        pipe = self.client.pipeline(transaction=False)
        for script, args in calls:
            if script is None:
                pipe.execute_command(*args)  # type: ignore[no-untyped-call]
            else:
                pipe.evalsha(script.sha, *args)
        results: list[Any] = pipe.execute(raise_on_error=False)
        for i, ((script, args), result) in enumerate(zip(calls, results)):
            if isinstance(result, rexc.NoScriptError) and script is not None:
                try:
                    results[i] = self.client.eval(script.text, *args)
                except rexc.ResponseError as exc:
                    results[i] = exc
            if raise_errors and isinstance(results[i], Exception):
                raise results[i]
        return results

    def producer_stats(self, producer_id: str, info: str) -> None:
        """Flush one producer's statistics on their own (at close)."""
        with wrapped("producer statistics"):
            scripts.PRODUCER_STATS(self.client, (producers_hash(self.namespace), producers_seen(self.namespace)),
                                   (producer_id, info, _PRODUCER_TTL_MS))

    # --- consuming -----------------------------------------------------------

    def fetch(self, queue: str, consumer_id: str, block_s: float) -> Optional[bytes]:
        """BLMOVE the oldest pending frame into the consumer's list; None on timeout."""
        k = self.keys(queue)
        with wrapped(f"fetch from {queue!r}"):
            frame = self._hot.execute("BLMOVE", k.pending, k.processing(consumer_id), "RIGHT", "LEFT", block_s)
        return cast(Optional[bytes], frame)

    def ack(self, queue: str, consumer_id: str, frame: bytes, fetch_next: bool) -> scripts.AckResult:
        with wrapped(f"ack on {queue!r}"):
            return scripts.ack(self._hot, self.keys(queue), consumer_id, frame, fetch_next, self.stats)

    def nack(self, queue: str, consumer_id: str, frame: bytes, *, retry_threshold: int, delay_ms: int,
             meta: str, fetch_next: bool) -> scripts.NackResult:
        with wrapped(f"nack on {queue!r}"):
            return scripts.nack(self._hot, self.keys(queue), consumer_id, frame, retry_threshold=retry_threshold,
                                delay_ms=delay_ms, meta=meta, fetch_next=fetch_next)

    def reclaim(self, queue: str, consumer_id: str, *, costs_attempt: bool, retry_threshold: int, reason: str,
                lock: Optional[scripts.Lock] = None, stale_after_ms: int = 0, unregister: bool = True,
                batch: int = defaults.RECLAIM_BATCH, **meta: Any) -> scripts.ReclaimResult:
        """Return every frame of the consumer's list to the queue (looping
        over batches); unregister the consumer once its list is empty. With
        ``stale_after_ms``, do nothing (remaining -1) if its heartbeat is fresh.
        With ``lock``, raise NotLeader unless the lock holds its token."""
        text = scripts.meta_json(reason, consumer=consumer_id, **meta)
        requeued = dead = 0
        with wrapped(f"reclaim on {queue!r}"):
            while True:
                r = scripts.reclaim(self.client, self.keys(queue), consumer_id, costs_attempt=costs_attempt,
                                    retry_threshold=retry_threshold, meta=text, batch=batch, lock=lock,
                                    stale_after_ms=stale_after_ms, unregister=unregister)
                requeued += r.requeued
                dead += r.dead_lettered
                if r.remaining <= 0:
                    return scripts.ReclaimResult(requeued, dead, r.remaining)

    def promote(self, queue: str, *, lock: Optional[scripts.Lock] = None,
                batch: int = defaults.PROMOTE_BATCH) -> scripts.PromoteResult:
        with wrapped(f"promote on {queue!r}"):
            return scripts.promote(self.client, self.keys(queue), batch=batch, lock=lock)

    def processing(self, queue: str, consumer_id: str) -> list[bytes]:
        """The frames in the consumer's list, oldest first."""
        with wrapped(f"read processing list of {queue!r}"):
            frames = cast(list[bytes], self.client.lrange(self.keys(queue).processing(consumer_id), 0, -1))
        return frames[::-1]

    def register_consumer(self, queue: str, consumer_id: str, info: Mapping[str, Any]) -> None:
        """Enter the consumer in the registry with a first heartbeat."""
        with wrapped(f"register consumer on {queue!r}"):
            self.client.sadd(queues_set(self.namespace), queue)
            scripts.heartbeat(self.client, self.keys(queue), [(consumer_id, _json(info))], register=True)

    def heartbeat(self, beats: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]]) -> list[tuple[str, str]]:
        """Renew the heartbeats of registered consumers, queue -> [(id, info)],
        all queues in one pipelined round trip. Returns (queue, id) of those no
        longer registered: declared dead, they must not go on."""
        items = [(q, b) for q, b in beats.items() if b]
        if not items:
            return []
        calls: list[tuple[Optional[scripts.Script], tuple[Any, ...]]] = []
        for queue, queue_beats in items:
            k = self.keys(queue)
            args: list[Any] = [0]
            for cid, info in queue_beats:
                args += [cid, _json(info)]
            calls.append((scripts.HEARTBEAT, (2, k.consumers, k.heartbeats, *args)))
        with wrapped("heartbeat"):
            replies = self._pipeline(calls)
        return [(q, _text(cid)) for (q, _), unknown in zip(items, replies) for cid in unknown]

    def stale_consumers(self, queue: str, timeout_ms: int, limit: int = 100) -> tuple[list[str], list[str]]:
        """(stale, orphan) consumer ids of the queue, judged by the Redis clock."""
        with wrapped(f"find stale consumers of {queue!r}"):
            return scripts.stale(self.client, self.keys(queue), timeout_ms=timeout_ms, limit=limit)

    # --- leader lock ---------------------------------------------------------

    def lock_acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        with wrapped(f"acquire {key}"):
            return bool(self.client.set(key, token, nx=True, px=ttl_ms))

    def lock_renew(self, key: str, token: str, ttl_ms: int) -> bool:
        with wrapped(f"renew {key}"):
            return scripts.lock_renew(self.client, key, token, ttl_ms)

    def lock_release(self, key: str, token: str) -> bool:
        with wrapped(f"release {key}"):
            return scripts.lock_release(self.client, key, token)

    def lock_holder(self, key: str) -> Optional[str]:
        with wrapped(f"read {key}"):
            value = self.client.get(key)
        return None if value is None else _text(cast(bytes, value))

    def record_slot(self, queue: str, slot: str, info: Mapping[str, Any]) -> None:
        """Restarts and last exit of a consumer slot (its supervisor writes)."""
        with wrapped(f"slot statistics of {queue!r}"):
            self.client.hset(self.keys(queue).slots, slot, _json(info))

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
            raw = self.client.hgetall(self.keys(queue).gc)
        return {_text(k): int(v) for k, v in raw.items()}

    def is_registered(self, queue: str, consumer_id: str) -> bool:
        """Whether the consumer is still in the registry (not declared dead)."""
        with wrapped(f"registry of {queue!r}"):
            return bool(self._hot.execute("HEXISTS", self.keys(queue).consumers, consumer_id))

    def count_late_ack(self, queue: str) -> None:
        """Count a late ack found after a reconnect (the ack script counts the others)."""
        with wrapped(f"counters of {queue!r}"):
            self.client.hincrby(self.keys(queue).counters, "late_acks", 1)

    def retired_with_messages(self, queue: str, watch_ms: int) -> list[str]:
        """Consumers unregistered less than ``watch_ms`` ago whose processing
        list is not empty; older retirees are forgotten."""
        k = self.keys(queue)
        with wrapped(f"retired consumers of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.time()
            pipe.zrange(k.retired, 0, -1, withscores=True)
            (secs, usecs), retired = pipe.execute()
            now_ms = int(secs) * 1000 + int(usecs) // 1000
            pipe = self.client.pipeline(transaction=False)
            ids = [_text(cid) for cid, at in retired if at >= now_ms - watch_ms]
            for cid in ids:
                pipe.llen(k.processing(cid))
            pipe.zremrangebyscore(k.retired, "-inf", f"({now_ms - watch_ms}")
            lengths = pipe.execute()[:-1]
        return [cid for cid, n in zip(ids, lengths) if n]

    def consumers(self, queue: str) -> dict[str, dict[str, Any]]:
        with wrapped(f"read consumers of {queue!r}"):
            raw = self.client.hgetall(self.keys(queue).consumers)
        return {_text(k): json.loads(v) for k, v in raw.items()}

    # --- inspecting ----------------------------------------------------------

    def sizes(self, queue: str) -> dict[str, int]:
        """Pending, delayed and dead-letter counts of the queue, one round trip."""
        k = self.keys(queue)
        with wrapped(f"sizes of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.llen(k.pending)
            pipe.zcard(k.delayed)
            pipe.llen(k.dead)
            pending, delayed, dead = pipe.execute()
        return {"pending": int(pending), "delayed": int(delayed), "dead": int(dead)}

    def counters(self, queue: str) -> dict[str, int]:
        with wrapped(f"counters of {queue!r}"):
            raw = self.client.hgetall(self.keys(queue).counters)
        return {_text(k): int(v) for k, v in raw.items()}

    def known_queues(self) -> list[str]:
        with wrapped("list queues"):
            names = cast(set[bytes], self.client.smembers(queues_set(self.namespace)))
        # Anyone can SADD there: a name that is not UTF-8 comes back with U+FFFD.
        return sorted(q.decode("utf-8", "replace") for q in names)

    # --- dead letters --------------------------------------------------------

    def dead_letters(self, queue: str, start: int = 0, count: int = 100) -> list[bytes]:
        """Dead-letter entries, newest first."""
        with wrapped(f"read dead letters of {queue!r}"):
            entries = self.client.lrange(self.keys(queue).dead, start, start + count - 1)
        return cast(list[bytes], entries)

    def dlq_requeue(self, queue: str, entries: Sequence[bytes]) -> int:
        with wrapped(f"requeue dead letters of {queue!r}"):
            return scripts.dlq_requeue(self.client, self.keys(queue), entries)

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
