"""What every Redis operation class of one Broker shares (messages.py,
registry.py, queues.py, contents.py, statistics.py, schedules.py): the
client, the connection held for the hot path, the namespace's keys, a
cluster's routing, and the wait for replicas after a write.

Each operation class is handed the one Session of its Broker; none inherits
from another, and none opens a connection of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Optional

import redis.exceptions as rexc
from redis.cluster import RedisCluster

from smqsup import defaults
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.core import plans
from smqsup.store.core.failures import wrapped
from smqsup.store.core.keycache import KeyCache
from smqsup.store.core.replies import LOGGER, T, confirmed, shortfall
from smqsup.store.sync import cluster
from smqsup.store.sync.connection import connect, send
from smqsup.store.sync.held import HeldConnection
from smqsup.store.sync.subscriber import Subscriber

log = logging.getLogger(LOGGER)


class Session:
    """One namespace's connection to Redis and what the operations on it
    share. One per Broker, one Broker per process: never used across fork."""

    def __init__(self, url: str, namespace: str, *, client_name: Optional[str], socket_timeout_s: float,
                 stats: bool, wait_replicas: int, wait_timeout_s: float) -> None:
        """``wait_replicas``: how many replicas must confirm a publish (and
        a schedule's firing, run_replicated()) within ``wait_timeout_s``
        before it is reported done; short of that, NotReplicated."""
        self.url = url
        self.namespace = namespace
        self.wait_replicas = wait_replicas
        self._settle_wait_off_until = 0.0  # acks and nacks do not wait for replicas before then
        self.wait_timeout_ms = max(1, round(wait_timeout_s * 1000))
        #: Count published and acked messages in the queue counters (scripts).
        self.stats = stats
        #: A redis.Redis, or a RedisCluster: typed Any, as redis-py types its
        #: replies by the decode_responses it does not know (ours: off, bytes).
        self.client: Any = connect(url, client_name=client_name, socket_timeout_s=socket_timeout_s)
        #: The slot map's keeper on a Redis Cluster (None on one server):
        #: batches and the held connection go to the master of their keys.
        self.router: Optional[cluster.Router] = None
        self.held: "HeldConnection | cluster.ClusterHeldConnection"
        if isinstance(self.client, RedisCluster):
            self.router = cluster.Router(self.client)
            self.held = cluster.ClusterHeldConnection(self.router)
        else:
            self.held = HeldConnection(self.client)
        #: Each queue's keys, made once: ``self.keys(queue)``.
        self.keys = KeyCache(namespace)
        #: Most messages one reclaim script call moves (the reclaims loop over batches).
        self.reclaim_batch = defaults.RECLAIM_BATCH

    def close(self) -> None:
        self.held.close()
        self.client.close()

    def send(self, batch: scripts.Batch) -> list[Any]:
        """connection.send(), or on a cluster cluster.send() (a round trip per master)."""
        if self.router is None:
            return send(self.client, batch)
        return cluster.send(self.router, batch, batch.deliver)

    def run(self, plan: "plans.WaitPlan[T]", what: str, subscriber: "Optional[Subscriber]" = None) -> T:
        """Drive ``plan`` (core/plans.py) on redis-py: each round trip it
        yields sent as one Batch, its replies sent back; its subscription
        steps performed by ``subscriber`` (a plan that subscribes needs
        one); errors as smqsup's, saying ``what`` (Stepper.driving)."""
        stepper: plans.Stepper[T] = plans.Stepper(plan)
        reply: Any = None
        with stepper.driving(what, None if subscriber is None else subscriber.unwatch):
            while (step := stepper.next(reply)) is not None:
                if (by := plans.performer(step, subscriber)) is not None:
                    reply = by.perform(step, stepper)
                else:
                    reply = self.send(plans.fill(scripts.Batch(self.client), step))
        return stepper.answer

    def on_node(self, queue: str, use: Callable[[Any], T]) -> T:
        """``use(client)`` on a client of the server holding ``queue``'s keys:
        a cluster's pipelines refuse MULTI and RENAMENX, one master's do not
        (a redirection is followed, as cluster.Router.routed says)."""
        router = self.router
        if router is None:
            return use(self.client)
        return router.routed(lambda: use(router.node_client(self.keys(queue).pending)))

    def with_clock(self, ask: Callable[[Any], object], *, raise_on_error: bool = True) -> tuple[Any, list[Any]]:
        """The Redis clock (TIME's reply) and the replies to the reads ``ask``
        queues on a pipeline, in one round trip; on a cluster, whose pipelines
        take no keyless command, TIME is sent first, apart, to any master."""
        pipe = self.client.pipeline(transaction=False)
        if self.router is not None:
            now = self.client.time()
            ask(pipe)
            return now, pipe.execute(raise_on_error=raise_on_error)
        pipe.time()
        ask(pipe)
        now, *replies = pipe.execute(raise_on_error=raise_on_error)
        return now, replies

    def drain(self, queue: str, call: scripts.Call[scripts.ReclaimResult]) -> scripts.ReclaimResult:
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

    # --- replication -----------------------------------------------------------

    def _waited(self, queue: str) -> Any:
        """WAIT for wait_replicas on the held connection (the one the write
        on ``queue`` just went on): its reply, or Redis's refusal of it."""
        try:
            return self.held.wait(self.keys(queue).pending, self.wait_replicas, self.wait_timeout_ms)
        except rexc.ResponseError as exc:  # WAIT refused (an ACL without it): the write stands
            return exc

    def replicated(self, queue: str, result: T, got: Any = None) -> T:
        """``result``, once wait_replicas replicas have the publish: ``got``,
        the reply of a WAIT already sent, or else one sent now (_waited);
        NotReplicated (carrying ``result``) if fewer have it."""
        if not self.wait_replicas:
            return result
        return confirmed(queue, result, self._waited(queue) if got is None else got, self.wait_replicas,
                         self.wait_timeout_ms)

    def settled(self, queue: str) -> None:
        """After an ack or nack, with wait_replicas: wait for the replicas, so
        that a failover repeats at most the messages in flight (an ack lost
        with its master hands its message out again). Fewer replicas than
        asked is said once, never raised: the settle stands on the master."""
        if time.monotonic() < self._settle_wait_off_until:
            return
        short = shortfall(self._waited(queue), self.wait_replicas, self.wait_timeout_ms)
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
        return self.replicated(queue, call.run(self.held))
