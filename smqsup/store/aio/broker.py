"""The asyncio way to Redis, for the AsyncProducer (client/aio_producer.py): a
redis.asyncio client (one server, Sentinel, or a Redis Cluster whose every
command goes to the master of its key's hash tag) and the publish operations
of store/ops/messages.py, running the same plan (core/publish_plan.py),
redis-py's errors wrapped into smqsup's (core/failures.py: wrapped).

    AsyncBroker.publish ─▶ pushed() ─▶ scripts.Batch ─▶ _send: one write on a connection of the pool,
        or per master (aio/cluster.py) ─▶ EVALSHA; what NOSCRIPT refused again by EVAL, then the WAITs
    AsyncBroker.tracking ─▶ tracked messages read through _send, waited for on one subscription
        connection of its own (aio/tracking.py, aio/subscriber.py)

As in connection.py, nothing is retried after a connection error (the
command may have run): a failure to connect before sending is NotSent, one
after is the caller's to find out about. A refusal by a cluster redirection
(it did not run) is sent again for up to routing.REDIRECT_PATIENCE_S
(aio/cluster.py).
Its callers take turns (AsyncBroker.turns): at most AIO_ROUND_TRIPS
operations in flight at once, each on a connection of its own (per master),
however many publishes are awaited together.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from typing import Any, Optional

import redis.asyncio as aredis
import redis.exceptions as rexc
from redis.asyncio import cluster as acluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from smqsup import defaults, safe
from smqsup.errors import BrokerError
from smqsup.store import scripts
from smqsup.store.aio.cluster import LOST, AsyncRouter, deliver
from smqsup.store.aio.events import AsyncEvents
from smqsup.store.aio.tracking import AsyncTracking, run
from smqsup.store.core import plans, urls
from smqsup.store.core.declared import NOTHING_DECLARED, Declared, PartitionCache, names_of, partitions
from smqsup.store.core.failures import NotSent, wrapped
from smqsup.store.core.keycache import KeyCache
from smqsup.store.core.publish_plan import PRODUCER_TTL_MS, pushed

log = logging.getLogger(__name__)


def connect(url: str, *, client_name: Optional[str], socket_timeout_s: float = defaults.SOCKET_TIMEOUT_S,
            connect_timeout_s: float = defaults.CONNECT_TIMEOUT_S) -> tuple[Any, list[Any]]:
    """(a redis.asyncio client for ``url``, the other clients to close with
    it: a Sentinel's), for the urls sync/connection.py's connect() takes, retries
    off. No I/O: a cluster reads its slot map at the first command. A bad
    url is the ConfigError sync/connection.py's connect() raises."""
    safe.register_url(url)
    options: dict[str, Any] = {"retry": Retry(NoBackoff(), 0), "socket_timeout": socket_timeout_s,
                               "socket_connect_timeout": connect_timeout_s, "health_check_interval": 0,
                               **urls.library()}
    try:
        if urls.is_cluster_url(url):
            return _cluster_client(url, options, client_name), []
        if client_name:
            options["redis_connect_func"] = _handshake(client_name)
        if url.startswith("sentinel://"):
            return _sentinel_client(url, options)
        return _one_client(url, options), []
    except (TypeError, ValueError, rexc.RedisError) as exc:
        raise urls.url_error(url, exc) from None


def _one_client(url: str, options: dict[str, Any]) -> Any:
    """A client for a redis://, rediss:// or unix:// url, its options checked
    now (a connection object made, no I/O). TypeError or ValueError if bad."""
    if not url.startswith("unix://"):
        options = {**options, "socket_keepalive": True}  # TCP only: notice a dead peer
    client = aredis.Redis.from_url(url, **options)
    pool = client.connection_pool
    pool.connection_class(**pool.connection_kwargs)
    urls.check_numbers(pool.connection_kwargs)
    return client


def _cluster_client(url: str, options: dict[str, Any], client_name: Optional[str]) -> Any:
    """A RedisCluster client for the seeds of a cluster url (urls.cluster_seeds)."""
    first, seeds = urls.cluster_seeds(url)
    _one_client(first, options)  # the options checked as a one-server url's are
    nodes = [acluster.ClusterNode(host, port) for host, port in seeds]
    client = acluster.RedisCluster.from_url(first, startup_nodes=nodes, **options)
    if client_name:
        # The nodes found when the slot map is read are made with these.
        client.nodes_manager.connection_kwargs["redis_connect_func"] = _handshake(client_name)
    return client


def _sentinel_client(url: str, options: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The master of a sentinel:// url, and the Sentinels' clients."""
    from redis.asyncio.sentinel import Sentinel

    hosts, service, db, password = urls.sentinel_address(url)
    watchers = {"socket_timeout": options["socket_connect_timeout"], **urls.library()}
    make: Any = Sentinel  # redis-py before 8 leaves Sentinel untyped, 8 types it
    sentinel = make(hosts, sentinel_kwargs=watchers, **options)
    return sentinel.master_for(service, db=db, password=password), list(sentinel.sentinels)


def _handshake(client_name: str) -> Any:
    """connection.py's handshake for redis.asyncio: the usual one, then
    CLIENT SETNAME, skipped when Redis refuses it (an ACL without it)."""
    async def on_connect(conn: Any) -> None:
        await conn.on_connect()
        try:
            await conn.send_command("CLIENT", "SETNAME", client_name)
            await conn.read_response()
        except rexc.ResponseError as exc:  # NOPERM, or CLIENT renamed away
            urls.setname_refused(log, exc)
    return on_connect


class AsyncBroker:
    """The publish operations of one namespace on redis.asyncio (see the
    module's docstring). Made outside or inside an event loop, used in one
    loop only; never shared across fork."""

    def __init__(self, url: str, namespace: str, *, client_name: Optional[str] = None,
                 socket_timeout_s: float = defaults.SOCKET_TIMEOUT_S, stats: bool = True, wait_replicas: int = 0,
                 wait_timeout_s: float = defaults.WAIT_TIMEOUT_S) -> None:
        """The arguments are store.broker.Broker's; no I/O until the first operation."""
        self.url = url
        self.namespace = namespace
        self.stats = stats
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = max(1, round(wait_timeout_s * 1000))
        self.client, self._others = connect(url, client_name=client_name, socket_timeout_s=socket_timeout_s)
        #: A cluster's router (None on one server).
        self._router = AsyncRouter(self.client) if isinstance(self.client, acluster.RedisCluster) else None
        #: Each queue's keys, made once: ``self.keys(queue)``.
        self.keys = KeyCache(namespace)
        #: Each queue's partition count and declared options, as ops/queues.py keeps them.
        self._cache = PartitionCache()
        #: queue -> its count being read (by the first publish that missed it).
        self._reading: dict[str, asyncio.Future[int]] = {}
        #: Held by each caller across its operations (a publish: encode, count, send):
        #: at most AIO_ROUND_TRIPS in flight, so as many connections (per master).
        self.turns = asyncio.Semaphore(defaults.AIO_ROUND_TRIPS)
        self.tracking = AsyncTracking(self.client, self._send, self.keys, self.turns, self._listener)
        self.events = AsyncEvents(self.client, self._send, self.keys, self._router is not None, self.turns)

    async def partitions(self, queue: str, *, fresh: bool = False) -> int:
        """store.queues.Queues.partitions(), the count read again at most every
        PARTITIONS_READ_S (at once when ``fresh``); publishes awaited
        together share one reading."""
        known = self._cache.fresh(queue, fresh)
        if known is not None:
            return known
        reading = self._reading.get(queue)
        if reading is None:
            reading = self._reading[queue] = asyncio.ensure_future(self._read_partitions(queue))
            reading.add_done_callback(lambda done: self._read(queue, done))
        # Shielded: one waiter cancelled does not cancel the others' reading.
        return await asyncio.shield(reading)

    def _read(self, queue: str, done: "asyncio.Future[int]") -> None:
        """A reading of ``queue``'s count is over: the next one reads afresh
        (its error is its waiters', and marked seen for when none is left)."""
        self._reading.pop(queue, None)
        if not done.cancelled():
            done.exception()

    async def _read_partitions(self, queue: str) -> int:
        """Read ``queue``'s partition count and declared options in one
        round trip (core/declared.py's plan, as ops/queues.py runs it)."""
        plan = partitions(self._cache, self.keys(queue), queue)
        return await run(plan, f"read the partitions of {queue!r}", self.client, self._send)

    def names(self, queue: str) -> "plans.Plan[list[str]]":
        """Broker.names(): the plan of ``queue``'s partition names, for tracking.run."""
        return names_of(self._cache, self.keys(queue), queue)

    async def declared(self, queue: str) -> "tuple[int | BrokerError, Declared]":
        """Queues.declared(): ``queue``'s partition count, or the BrokerError
        reading it raised, and what its consumers declared (each 0 when
        unreadable), in one cached read."""
        try:
            count: "int | BrokerError" = await self.partitions(queue)
        except BrokerError as exc:
            count = exc
        return count, self._cache.declared.get(queue, NOTHING_DECLARED)

    async def _listener(self) -> Any:
        """A connection of its own (no pool's, not connected yet) for the
        waits' subscription: to the server, or to one master of a cluster (a
        PUBLISH, from a script too, reaches every node of a cluster)."""
        if self._router is None:
            return self.client.connection_pool.make_connection()
        await self.client.initialize()
        node = random.choice(self.client.get_primaries())
        return node.connection_class(**node.connection_kwargs)

    async def publish(self, queue: str, frames: Sequence[Any], options: Optional[scripts.Options], *,
                      register: bool, producer: Optional[tuple[str, str]] = None) -> list[tuple[str, bool]]:
        """Messages.publish() on redis.asyncio: the same plan (publish_plan.pushed()), sent here."""
        plan = pushed(self, queue, frames, options, register=register, producer=producer)
        return await run(plan, f"publish to {queue!r}", self.client, self._send)

    async def producer_stats(self, producer_id: str, info: str) -> None:
        """Flush one producer's statistics on their own (at close), in one of the turns."""
        batch = scripts.Batch(self.client)
        batch.add(scripts.producer_stats(self.namespace, producer_id, info, PRODUCER_TTL_MS))
        with wrapped("producer statistics"):
            async with self.turns:
                reply = (await self._send(batch))[0]
            if isinstance(reply, Exception):
                raise reply

    async def close(self) -> None:
        """Close every connection (the waits' subscription, a Sentinel's clients too)."""
        await self.tracking.close()
        for client in [self.client, *self._others]:
            await client.aclose()

    # --- round trips ---------------------------------------------------------------

    async def _send(self, batch: scripts.Batch) -> list[Any]:
        """Send ``batch``: its replies in order, error replies left in place.
        On one server, NotSent if Redis could not be reached before anything
        was sent; a lost connection after raises. On a cluster, as
        cluster.send(): one round trip per master."""
        if self._router is not None:
            return await self._router.send(batch)
        pool = self.client.connection_pool
        try:
            conn = await pool.get_connection()  # connected: a failure here sent nothing
        except LOST as exc:
            raise NotSent(str(exc)) from exc
        try:
            return await deliver(conn, batch, range(len(batch)))
        finally:
            await pool.release(conn)
