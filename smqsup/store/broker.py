"""Thin adapter between smqsup and Redis: typed calls for each operation,
every one wrapped so that redis-py errors become smqsup errors. Here: the
calls that move messages (publish, fetch, settle, reclaim); the rest, for
operators, views and the collector, are broker_ops.py's (a mixin); the
connection itself is connection.py's, a cluster's routing cluster.py's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypeVar, cast

import redis.exceptions as rexc
from redis.cluster import RedisCluster

from smqsup import defaults
from smqsup.errors import BrokerError, NotReplicated, PushRefused
from smqsup.keys import QueueKeys, logical_name, queues_set
from smqsup.logs import warn_once
from smqsup.store import cluster, scripts
from smqsup.store.connection import HotLine, check_server, connect, send, wrapped
from smqsup.store.consumer_info import ConsumerInfo
from smqsup.store.operations import Operations

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Most frames one publish script call pushes (publish_many sends several
#: calls in one pipelined round trip).
PUBLISH_CHUNK = 1000
#: Producers silent this long drop out of the statistics, in ms.
_PRODUCER_TTL_MS = 600_000
#: A reply of a batch sent to a master that could not be reached.
_UNREACHABLE = (rexc.ConnectionError, rexc.TimeoutError, OSError)


def _check_queued(queue: str, sizes: Sequence[int], replies: Sequence[Any]) -> None:
    """Raise PushRefused, saying which messages were queued, if Redis refused
    any of the publish calls (one reply per call of ``sizes`` messages)."""
    queued = [not isinstance(reply, Exception) for reply, n in zip(replies, sizes) for _ in range(n)]
    refusal = next((reply for reply in replies if isinstance(reply, Exception)), None)
    if refusal is not None:
        raise PushRefused(f"publish to {queue!r}: Redis refused {queued.count(False)} of {len(queued)} "
                          f"message(s): {refusal}", queued)


class Broker(Operations):
    """Redis operations of one namespace. One instance per process: never
    share a Broker (its sockets) across fork."""

    def __init__(self, url: str, namespace: str = defaults.NAMESPACE, *, client_name: Optional[str] = None,
                 socket_timeout_s: float = defaults.SOCKET_TIMEOUT_S, stats: bool = True,
                 wait_replicas: int = 0, wait_timeout_s: float = defaults.WAIT_TIMEOUT_S) -> None:
        """``wait_replicas``: how many replicas must confirm a publish (and
        a schedule's firing, run_replicated()) within ``wait_timeout_s``
        before it is reported done; short of that, NotReplicated."""
        self.url = url
        self.namespace = namespace
        self.wait_replicas = wait_replicas
        self._settle_wait_off_until = 0.0  # acks and nacks do not wait for replicas before then
        self._wait_timeout_ms = max(1, round(wait_timeout_s * 1000))
        #: Count published and acked messages in the queue counters (scripts).
        self.stats = stats
        self.client = connect(url, client_name=client_name, socket_timeout_s=socket_timeout_s)
        #: The slot map's keeper on a Redis Cluster (None on one server):
        #: batches and the held connection go to the master of their keys.
        self._router: Optional[cluster.Router] = None
        self._hot: "HotLine | cluster.ClusterHotLine"
        if isinstance(self.client, RedisCluster):
            self._router = cluster.Router(self.client)
            self._hot = cluster.ClusterHotLine(self._router)
        else:
            self._hot = HotLine(self.client)
        self._keys: dict[str, QueueKeys] = {}
        #: queue -> (partitions, monotonic time read).
        self._partitions: dict[str, tuple[int, float]] = {}
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

    @property
    def clustered(self) -> bool:
        """Whether this broker's Redis is a Redis Cluster."""
        return self._router is not None

    def check_server(self) -> list[str]:
        """connection.check_server() on this broker's Redis (each master of a cluster)."""
        if self._router is None:
            return check_server(self.client)
        with wrapped("read the masters of the Redis Cluster"):
            masters = cast(RedisCluster, self.client).get_primaries()  # type: ignore[no-untyped-call]
        warnings: list[str] = []
        for node in masters:
            found = check_server(cast(RedisCluster, self.client).get_redis_connection(node))
            warnings += [f"{node.name}: {w}" for w in found if w not in warnings]
        return warnings

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
        chunks = [frames[start:start + PUBLISH_CHUNK] for start in range(0, len(frames), PUBLISH_CHUNK)]
        self._publish([scripts.publish(self.keys(queue), chunk, self.stats) for chunk in chunks],
                      [len(chunk) for chunk in chunks], queue, register=register, producer=producer)

    def _push_alone(self, queue: str, frames: Sequence[bytes]) -> None:
        """push() of one chunk and nothing else: one script call on the held connection."""
        with wrapped(f"publish to {queue!r}"):
            try:
                scripts.publish(self.keys(queue), frames, self.stats).run(self._hot)
            except rexc.ResponseError as exc:  # refused before it wrote anything
                raise PushRefused(f"publish to {queue!r}: Redis refused it: {exc}", [False] * len(frames)) from exc
            self._replicated(queue, None)

    def push_with(self, queue: str, items: Sequence[tuple[str, bytes, Optional[str]]], options: scripts.Options,
                  *, register: bool, producer: Optional[tuple[str, str]] = None) -> list[tuple[str, bool]]:
        """Publish (id, payload, dedup key or None) items with ``options``
        (publish_options.lua, up to PUBLISH_CHUNK items a call) in one round
        trip, with the registry and statistics as push() sends them. Per
        item: (its id, True) when queued, (the id holding its dedup key,
        False) when not. Raises PushRefused and BrokerConnectionError as
        push() does."""
        if not register and producer is None and len(items) <= PUBLISH_CHUNK:
            # One script and nothing else: on the held connection, as _push_alone.
            with wrapped(f"publish to {queue!r}"):
                try:
                    pairs = scripts.publish_options(self.keys(queue), items, options, self.stats).run(self._hot)
                except rexc.ResponseError as exc:  # refused before it wrote anything
                    raise PushRefused(f"publish to {queue!r}: Redis refused it: {exc}",
                                      [False] * len(items)) from exc
                return self._replicated(queue, pairs)
        chunks = [items[start:start + PUBLISH_CHUNK] for start in range(0, len(items), PUBLISH_CHUNK)]
        try:
            replies = self._publish([scripts.publish_options(self.keys(queue), chunk, options, self.stats)
                                     for chunk in chunks], [len(chunk) for chunk in chunks], queue,
                                    register=register, producer=producer)
        except NotReplicated as exc:  # its result as the one-call path gives it: the pairs
            exc.result = [pair for reply in cast(list[Any], exc.result) for pair in reply]
            raise
        return [pair for reply in replies for pair in reply]

    def _publish(self, calls: Sequence[scripts.Call[Any]], sizes: Sequence[int], queue: str, *, register: bool,
                 producer: Optional[tuple[str, str]]) -> list[Any]:
        """Send publish script ``calls`` (of ``sizes`` messages) in one round
        trip with the registry and statistics push() describes; their replies.
        PushRefused if Redis refused any call, saying which messages were queued."""
        batch = scripts.Batch(self.client)
        # What each call that does not queue messages is, for the log.
        bookkeeping: dict[int, str] = {}
        if register:
            bookkeeping[len(batch)] = "queue registry"
            batch.command("SADD", queues_set(self.namespace), logical_name(queue))
        first = len(batch)
        for call in calls:
            batch.add(call)
        waited = len(batch)
        if self.wait_replicas:  # on the connection (and the master) the calls went on, after them
            batch.command("WAIT", self.wait_replicas, self._wait_timeout_ms, route=self.keys(queue).pending)
        if producer is not None:
            bookkeeping[len(batch)] = "producer statistics"
            batch.add(scripts.producer_stats(self.namespace, producer[0], producer[1], _PRODUCER_TTL_MS))
        with wrapped(f"publish to {queue!r}"):
            results = self._send(batch)
            replies = results[first:first + len(calls)]
            # On a cluster the registry and statistics live on other masters:
            # one of those unreachable must not hide whether messages were queued.
            unknown = next((r for r in replies if isinstance(r, _UNREACHABLE)), None)
            if unknown is not None:
                raise unknown
        _check_queued(queue, sizes, replies)
        # The messages are queued: a refused registry entry or statistics flush
        # (OOM, an ACL NOPERM) must not turn that into an error.
        for i, what in bookkeeping.items():
            if isinstance(results[i], Exception):
                warn_once(log, f"refused:{what}", "publish to %r: messages queued, but Redis refused the %s "
                          "(said once; later refusals at debug level): %s", queue, what, results[i])
        if self.wait_replicas:
            self._replicated(queue, replies, got=results[waited])
        return replies

    def _send(self, batch: scripts.Batch) -> list[Any]:
        """connection.send(), or on a cluster cluster.send() (a round trip per master)."""
        if self._router is None:
            return send(self.client, batch)
        return cluster.send(self._router, batch, batch.deliver)

    def _waited(self, queue: str) -> Any:
        """WAIT for wait_replicas on the held connection (the one the write
        on ``queue`` just went on): its reply, or Redis's refusal of it."""
        try:
            return self._hot.wait(self.keys(queue).pending, self.wait_replicas, self._wait_timeout_ms)
        except rexc.ResponseError as exc:  # WAIT refused (an ACL without it): the write stands
            return exc

    def _shortfall(self, got: Any) -> Optional[tuple[int, str]]:
        """(replicas that confirmed, why) when WAIT's reply ``got`` (or its
        refusal) falls short of wait_replicas; None when it does not."""
        if isinstance(got, Exception):
            return 0, f"Redis refused WAIT ({got}), so no replica is known to have it"
        if int(got) < self.wait_replicas:
            return int(got), (f"{int(got)} of {self.wait_replicas} replica(s) confirmed it within "
                              f"{self._wait_timeout_ms} ms")
        return None

    def _replicated(self, queue: str, result: T, got: Any = None) -> T:
        """``result``, once wait_replicas replicas have the publish: ``got``,
        the reply of a WAIT already sent, or else one sent now (_waited);
        NotReplicated (carrying ``result``) if fewer have it."""
        if not self.wait_replicas:
            return result
        short = self._shortfall(self._waited(queue) if got is None else got)
        if short is not None:
            raise NotReplicated(f"publish to {queue!r}: done on the master, but {short[1]}", short[0], result)
        return result

    def _settled(self, queue: str) -> None:
        """After an ack or nack, with wait_replicas: wait for the replicas, so
        that a failover repeats at most the messages in flight (an ack lost
        with its master hands its message out again). Fewer replicas than
        asked is said once, never raised: the settle stands on the master."""
        if time.monotonic() < self._settle_wait_off_until:
            return
        short = self._shortfall(self._waited(queue))
        if short is not None:
            # Not every settle pays wait_timeout while a replica is away: the
            # next ones do not wait for a while, then look again.
            self._settle_wait_off_until = time.monotonic() + defaults.SETTLE_WAIT_PAUSE_S
            warn_once(log, f"unreplicated:{queue}", "queue %s: a message was settled on the master, but %s: a "
                      "failover now would hand it out again; settles stop waiting for %g s, then try again "
                      "(said once; later at debug level)", queue, short[1], defaults.SETTLE_WAIT_PAUSE_S)

    def run_replicated(self, queue: str, call: scripts.Call[T]) -> T:
        """Run a script ``call`` on ``queue``'s keys on the held connection,
        then wait for the replicas as a publish does (a schedule's firing)."""
        return self._replicated(queue, call.run(self._hot))

    def producer_stats(self, producer_id: str, info: str) -> None:
        """Flush one producer's statistics on their own (at close)."""
        with wrapped("producer statistics"):
            scripts.producer_stats(self.namespace, producer_id, info, _PRODUCER_TTL_MS).run(self.client)

    # --- consuming -----------------------------------------------------------

    def fetch(self, queue: str, consumer_id: str, block_s: float) -> tuple[Optional[bytes], bool]:
        """BLMOVE the oldest pending frame into the consumer's list (None on
        timeout), and whether the queue was paused right after (same round
        trip: the flag is read after the move, so a frame taken after a
        pause is known as such; Consumer hands it back with screen())."""
        k = self.keys(queue)
        with wrapped(f"fetch from {queue!r}"):
            frame, paused = self._hot.execute_many(
                ("BLMOVE", k.pending, k.processing(consumer_id), "RIGHT", "LEFT", block_s), ("EXISTS", k.paused),
                raise_error=False)
            if isinstance(frame, rexc.ResponseError):  # BLMOVE refused: it moved nothing
                if "unknown command" in str(frame).lower():
                    # INFO may have been refused at start, so nobody has checked the version.
                    raise BrokerError(f"fetch from {queue!r}: Redis has no BLMOVE ({frame}): smqsup needs "
                                      f"Redis >= 6.2") from frame
                raise frame
        # The flag unread (a cluster refused EXISTS alone, mid-resharding): as
        # if paused, so the frame is screened (screen.lua reads the flag).
        return cast(Optional[bytes], frame), bool(paused) or isinstance(paused, Exception)

    def take(self, queue: str, consumer_id: str, count: int = 1,
             rate: scripts.Rate = scripts.NO_RATE) -> scripts.TakeResult:
        """Take up to ``count`` ready frames (priorities first) without
        blocking, checking the consumer's registration and the paused flag,
        each start booked under the queue's ``rate`` limit."""
        with wrapped(f"fetch from {queue!r}"):
            return scripts.take(self.keys(queue), consumer_id, count, rate).run(self._hot)

    def exchange(self, queue: str, calls: Sequence[scripts.Call[Any]]) -> list[Any]:
        """Run ``calls`` (acks, nacks, a take: a concurrent consumer's settles
        and fetches) in one round trip on the held connection; their results
        in order. A script the server does not know (NOSCRIPT: it did not run)
        is sent again alone by its text. An error reply raises BrokerError
        once every reply is read: which calls ran is then known only from
        Redis (the consumer's recovery reads its own list)."""
        with wrapped(f"ack and fetch on {queue!r}"):
            replies = self._hot.execute_many(
                *(("EVALSHA", c.script.sha, len(c.keys), *c.keys, *c.args) for c in calls), raise_error=False)
            results = []
            for call, reply in zip(calls, replies):
                if isinstance(reply, rexc.NoScriptError):
                    reply = call.script(self._hot, call.keys, call.args)
                elif isinstance(reply, Exception):
                    raise reply
                results.append(call.read(reply))
            if self.wait_replicas:
                self._settled(queue)
            return results

    def screen(self, queue: str, consumer_id: str, frame: bytes,
               rate: scripts.Rate = scripts.NO_RATE) -> tuple[int, int]:
        """(scripts.HANDLE, GIVEN_BACK (paused), EXPIRED, RATE_LIMITED (given
        back) or GONE; µs to wait) for a frame fetch() just moved into the
        consumer's list."""
        with wrapped(f"fetch from {queue!r}"):
            return scripts.screen(self.keys(queue), consumer_id, frame, rate).run(self._hot)

    def ack(self, queue: str, consumer_id: str, frame: bytes, fetch_next: bool,
            rate: scripts.Rate = scripts.NO_RATE) -> scripts.AckResult:
        with wrapped(f"ack on {queue!r}"):
            result = scripts.ack(self.keys(queue), consumer_id, frame, fetch_next, self.stats, rate).run(self._hot)
            if self.wait_replicas:
                self._settled(queue)
            return result

    def nack(self, queue: str, consumer_id: str, frame: bytes, *, retry_threshold: int, delay_ms: int,
             meta: str, fetch_next: bool, dead_event: str = "",
             rate: scripts.Rate = scripts.NO_RATE) -> scripts.NackResult:
        with wrapped(f"nack on {queue!r}"):
            result = scripts.nack(self.keys(queue), consumer_id, frame, retry_threshold=retry_threshold,
                                  delay_ms=delay_ms, meta=meta, fetch_next=fetch_next,
                                  dead_event=dead_event, rate=rate).run(self._hot)
            if self.wait_replicas:
                self._settled(queue)
            return result

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
            self.client.sadd(queues_set(self.namespace), logical_name(queue))
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
            replies = self._send(batch)
            unreachable = next((r for r in replies if isinstance(r, _UNREACHABLE)), None)
            if unreachable is not None:  # a master of a cluster (renewals are idempotent)
                raise unreachable
        refused = {q: f"heartbeat: Redis error: {r}" for (q, _), r in zip(items, replies) if isinstance(r, Exception)}
        lost = [(q, cid) for (q, _), unknown in zip(items, replies) if q not in refused for cid in unknown]
        return lost, refused

    def stale_consumers(self, queue: str, timeout_ms: int, limit: int = 100) -> tuple[list[str], list[str]]:
        """(stale, orphan) consumer ids of the queue, judged by the Redis clock."""
        with wrapped(f"find stale consumers of {queue!r}"):
            return scripts.stale(self.keys(queue), timeout_ms=timeout_ms, limit=limit).run(self.client)
