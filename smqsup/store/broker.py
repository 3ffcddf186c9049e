"""The Broker: the handle on one namespace in Redis that every process
makes (``Broker(url, namespace, client_name=...)``), and the only way the
rest of smqsup reaches Redis. Its operations are plain classes by concern,
one attribute each, all sharing the Broker's one link.Link:

    broker.messages     publish, fetch, settle, promote, hand back (messages.py)
    broker.registry     consumers, heartbeats, reclaims, the leader lock (registry.py)
    broker.queues       known queues, pause and resume, partitions (queues.py)
    broker.contents     listings, removal by id, dead letters (contents.py)
    broker.control      requests to a running supervisor: smqsup roll (control.py)
    broker.statistics   sizes, counters, history, producers, read_queues (statistics.py)
    broker.schedules    schedules declared, fired, paused, read (schedules.py)
    broker.tracking     tracked messages' records, waits, progress (tracking.py)
    broker.workflows    dependencies: children held, told, released (workflows.py)
    broker.batches      batches: opened, members added and counted, callbacks fired (batches.py)
    broker.lags         the lag of queues: their oldest ready message's age (lag.py)
    broker.supervisors  what each supervisor says of its consumers of a queue (supervisors.py)

Every operation turns redis-py's errors into smqsup's (connection.wrapped).
"""

from __future__ import annotations

from typing import Any, Optional, cast

from redis.cluster import RedisCluster

from smqsup import defaults
from smqsup.keys import QueueKeys
from smqsup.store.batches import Batches
from smqsup.store.connection import check_server, wrapped
from smqsup.store.contents import Contents
from smqsup.store.control import Control
from smqsup.store.events import Events
from smqsup.store.groups import Groups
from smqsup.store.lag import Lags
from smqsup.store.link import Link
from smqsup.store.messages import Messages
from smqsup.store.queues import Queues
from smqsup.store.registry import Registry
from smqsup.store.schedules import Schedules
from smqsup.store.statistics import Statistics
from smqsup.store.supervisors import Supervisors
from smqsup.store.tracking import Tracking
from smqsup.store.workflows import Workflows


class Broker:
    """Redis operations of one namespace. One instance per process: never
    share a Broker (its sockets) across fork."""

    def __init__(self, url: str, namespace: str = defaults.NAMESPACE, *, client_name: Optional[str] = None,
                 socket_timeout_s: float = defaults.SOCKET_TIMEOUT_S, stats: bool = True,
                 wait_replicas: int = 0, wait_timeout_s: float = defaults.WAIT_TIMEOUT_S) -> None:
        """``wait_replicas``: how many replicas must confirm a publish (and
        a schedule's firing) within ``wait_timeout_s`` before it is reported
        done; short of that, NotReplicated. ``stats``: count published and
        acked messages in the queue counters."""
        self._link = Link(url, namespace, client_name=client_name, socket_timeout_s=socket_timeout_s, stats=stats,
                          wait_replicas=wait_replicas, wait_timeout_s=wait_timeout_s)
        self.messages = Messages(self._link)
        self.registry = Registry(self._link)
        self.queues = Queues(self._link)
        self.contents = Contents(self._link)
        self.control = Control(self._link)
        self.statistics = Statistics(self._link, self.queues)
        self.schedules = Schedules(self._link)
        self.tracking = Tracking(self._link)
        self.events = Events(self._link)
        self.batches = Batches(self._link)
        self.workflows = Workflows(self._link, self.queues, self.batches)
        self.lags = Lags(self._link, self.queues)
        self.supervisors = Supervisors(self._link)
        self.groups = Groups(self._link, self.queues)

    @property
    def url(self) -> str:
        return self._link.url

    @property
    def namespace(self) -> str:
        return self._link.namespace

    @property
    def stats(self) -> bool:
        """Whether the scripts count published and acked messages in the queue counters."""
        return self._link.stats

    @property
    def wait_replicas(self) -> int:
        return self._link.wait_replicas

    @property
    def reclaim_batch(self) -> int:
        """Most messages one reclaim script call moves (the reclaims loop over batches)."""
        return self._link.reclaim_batch

    @reclaim_batch.setter
    def reclaim_batch(self, n: int) -> None:
        self._link.reclaim_batch = n

    @property
    def client(self) -> Any:
        """The redis-py client (link.Link.client), for tests: outside store/
        nothing in smqsup touches it."""
        return self._link.client

    def keys(self, queue: str) -> QueueKeys:
        return self._link.keys(queue)

    def close(self) -> None:
        self.tracking.close()
        self._link.close()

    # --- server ------------------------------------------------------------

    def ping(self) -> None:
        with wrapped("PING"):
            self._link.client.ping()

    @property
    def clustered(self) -> bool:
        """Whether this broker's Redis is a Redis Cluster."""
        return self._link.router is not None

    def check_server(self) -> list[str]:
        """connection.check_server() on this broker's Redis (each master of a cluster)."""
        client = self._link.client
        if self._link.router is None:
            return check_server(client)
        with wrapped("read the masters of the Redis Cluster"):
            masters = cast(RedisCluster, client).get_primaries()  # type: ignore[no-untyped-call]
        warnings: list[str] = []
        for node in masters:
            found = check_server(cast(RedisCluster, client).get_redis_connection(node))
            warnings += [f"{node.name}: {w}" for w in found if w not in warnings]
        return warnings

    def shutdown_server(self) -> None:
        """SHUTDOWN the Redis server (an embedded one, at its owner's stop)."""
        with wrapped("SHUTDOWN"):
            self._link.client.shutdown()
