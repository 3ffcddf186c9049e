"""A consumer's entry in the registry of every partition of its queue: entering
it, a new id once declared dead, and leaving it at a stop."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

from smqsup import defaults
from smqsup.config.model import QueueConfig
from smqsup.errors import BrokerConnectionError, BrokerError
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.store.core.declared import Declared
from smqsup.worker.consumer_state import Identity
from smqsup.worker.fetching import Fetcher
from smqsup.worker.runners import sleep_unless

log = logging.getLogger(__name__)


def new_consumer_id(queue: str) -> str:
    """A consumer id unique across hosts and restarts: host, pid and random."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class Registration:
    """Enters, renews and leaves the registry for ``identity``. The
    collector of each partition must find our list there, so the consumer
    registers in every partition, and draws its home partition first.
    ``stopping`` tells when to give up waiting for Redis."""

    def __init__(self, broker: Broker, queue: QueueConfig, identity: Identity, fetcher: Fetcher,
                 stopping: Callable[[], bool]) -> None:
        self.broker = broker
        self.queue = queue
        self.identity = identity
        self.fetcher = fetcher
        self.stopping = stopping

    def enter(self) -> bool:
        """Register, waiting for Redis as long as it takes: True once
        registered, False if a stop came first."""
        backoff = defaults.RECONNECT_BACKOFF_MIN_S
        while True:
            try:
                self._register()
                self.identity.registered = True
                return True
            except BrokerError as exc:
                # Unreachable, or refusing for now (OOM, a registry key of the
                # wrong type): a consumer that gave up here would crash-loop its
                # queue into FATAL over what an operator fixes in Redis.
                if self.stopping():
                    log.warning("queue %s: consumer %s stops before it could register: %s",
                                self.fetcher.name, self.identity.consumer_id, exc)
                    return False
                why = "unreachable" if isinstance(exc, BrokerConnectionError) else "refusing"
                log.warning("queue %s: Redis %s (%s); retrying in %.2fs", self.fetcher.name, why, exc, backoff)
                sleep_unless(backoff, self.stopping)
                backoff = min(backoff * 2, defaults.RECONNECT_BACKOFF_MAX_S)

    def _register(self) -> None:
        f = self.fetcher
        if not f.partitions.drawn:
            f.repartition(self.broker.queues.declare_partitions(self.queue.name, self.queue.partitions))
            self.broker.queues.declare_options(self.queue.name, Declared(self.queue.result_ttl_s, self.queue.events_cap))
            f.partitions.draw(self.broker.queues.partition_ticket(self.queue.name) if f.partitions.many else 0)
            f.move(f.partitions.home)
        info = ConsumerInfo(pid=os.getpid(), host=socket.gethostname(), queue=self.queue.name, started_at=time.time())
        for name in f.partitions.names:
            self.broker.registry.register_consumer(name, self.identity.consumer_id, info)

    def declared_dead(self) -> None:
        """Say that the collector declared us dead (the engine then stops or renews)."""
        log.warning("queue %s: consumer %s was declared dead by the garbage collector (paused past "
                    "heartbeat_timeout); its messages were requeued", self.fetcher.name, self.identity.consumer_id)

    def renew(self) -> bool:
        """Declared dead, nothing in hand: go on under a new id (False: a
        stop came first). Anything moved into the old list after the
        collector emptied it goes back, free: those messages were never
        handed to a handler."""
        ident = self.identity
        old = ident.consumer_id
        ident.consumer_id = new_consumer_id(self.queue.name)
        ident.registered = ident.lost = False
        if not self.enter():
            return False
        for name in self.fetcher.partitions.names:
            self.broker.messages.return_stopped(name, old, reason="consumer re-registered")
        log.info("queue %s: consumer %s continues as %s", self.fetcher.name, old, ident.consumer_id)
        return True

    def leave(self, unregister: bool) -> None:
        """Clean exit: return whatever is still in our lists (nothing,
        normally) without costing an attempt; ``unregister``: leave the
        registry too. Under a supervisor the parent unregisters us when it
        reaps us, so that its heartbeat never sees a consumer that merely
        stopped as one declared dead."""
        cid = self.identity.consumer_id
        try:
            moved = 0
            for name in self.fetcher.partitions.names:
                if unregister:
                    r = self.broker.messages.return_stopped(name, cid, reason="consumer stopped")
                else:
                    r = self.broker.messages.return_held(name, cid, reason="consumer stopped")
                moved += r.requeued + r.dead_lettered
        except BrokerError as exc:  # unreachable or refusing: the collector reclaims the list later
            log.error("queue %s: consumer %s could not unregister (%s)", self.fetcher.name, cid, exc)
            return
        if moved:
            log.info("queue %s: consumer %s returned %d message(s) on stop", self.fetcher.name, cid, moved)
