"""The Broker: the handle on one namespace in Redis that every process
makes (``Broker(url, namespace, client_name=...)``), and the only way the
rest of smqsup reaches Redis. Its operations are plain classes by concern,
one attribute each, all sharing the Broker's one session.Session:

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

Every operation turns redis-py's errors into smqsup's (core/failures.py: wrapped).
"""

from __future__ import annotations

from typing import Any, Optional, cast

from redis.cluster import RedisCluster

from smqsup import defaults
from smqsup.keys import QueueKeys
from smqsup.store.core import plans
from smqsup.store.core.declared import names_of
from smqsup.store.core.failures import wrapped
from smqsup.store.ops.batches import Batches
from smqsup.store.ops.contents import Contents
from smqsup.store.ops.control import Control
from smqsup.store.ops.events import Events
from smqsup.store.ops.groups import Groups
from smqsup.store.ops.lag import Lags
from smqsup.store.ops.messages import Messages
from smqsup.store.ops.queues import Queues
from smqsup.store.ops.registry import Registry
from smqsup.store.ops.schedules import Schedules
from smqsup.store.ops.statistics import Statistics
from smqsup.store.ops.supervisors import Supervisors
from smqsup.store.ops.tracking import Tracking
from smqsup.store.ops.workflows import Workflows
from smqsup.store.sync.connection import check_server
from smqsup.store.sync.session import Session


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
        self._session = Session(url, namespace, client_name=client_name, socket_timeout_s=socket_timeout_s, stats=stats,
                                wait_replicas=wait_replicas, wait_timeout_s=wait_timeout_s)
        #: The settings it was made with, as given (read only: a new Broker for others).
        self.url, self.namespace, self.stats, self.wait_replicas = url, namespace, stats, wait_replicas
        self.messages = Messages(self._session)
        self.registry = Registry(self._session)
        self.queues = Queues(self._session)
        self.contents = Contents(self._session)
        self.control = Control(self._session)
        self.statistics = Statistics(self._session, self.queues)
        self.schedules = Schedules(self._session)
        self.tracking = Tracking(self._session)
        self.events = Events(self._session)
        self.batches = Batches(self._session)
        self.workflows = Workflows(self._session, self.queues, self.batches)
        self.lags = Lags(self._session, self.queues)
        self.supervisors = Supervisors(self._session)
        self.groups = Groups(self._session, self.queues)

    @property
    def reclaim_batch(self) -> int:
        """Most messages one reclaim script call moves (the reclaims loop over batches)."""
        return self._session.reclaim_batch

    @reclaim_batch.setter
    def reclaim_batch(self, n: int) -> None:
        self._session.reclaim_batch = n

    @property
    def client(self) -> Any:
        """The redis-py client (session.Session.client), for tests: outside store/
        nothing in smqsup touches it."""
        return self._session.client

    def names(self, queue: str) -> "plans.Plan[list[str]]":
        """The plan of ``queue``'s partition names (core/declared.py: names_of), for tracking.run."""
        return names_of(self.queues.cache, self.keys(queue), queue)

    def keys(self, queue: str) -> QueueKeys:
        return self._session.keys(queue)

    def close(self) -> None:
        self.tracking.close()
        self._session.close()

    # --- server ------------------------------------------------------------

    def ping(self) -> None:
        with wrapped("PING"):
            self._session.client.ping()

    @property
    def clustered(self) -> bool:
        """Whether this broker's Redis is a Redis Cluster."""
        return self._session.router is not None

    def check_server(self) -> list[str]:
        """connection.check_server() on this broker's Redis (each master of a cluster)."""
        client = self._session.client
        if self._session.router is None:
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
            self._session.client.shutdown()
