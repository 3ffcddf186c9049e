"""Redis Cluster: the routing of the commands smqsup sends on its own connections (the held connection of the
hot path, pipelined batches) to the node that serves their keys.

(connection.connect() makes the ``RedisCluster`` client of a
``redis+cluster://`` url.) Everything else goes through redis-py's ``RedisCluster``, which routes each
command by its key and follows MOVED and ASK itself. Every key smqsup forms
carries a hash tag (keys.py), and every script call and batch names keys of
one tag, so no command crosses slots.

Redirections. A node answers MOVED, ASK, TRYAGAIN or CLUSTERDOWN *instead* of
running a command, so a command refused that way is sent again, never one
that ran:

- MOVED: the slot lives elsewhere now (a resharding finished, a replica was
  promoted); the slot map is corrected and the command sent to the new owner.
- ASK and TRYAGAIN: the slot is being migrated right now. Rather than follow
  ASK key by key, the command waits a few ms and is sent again: migrating one
  slot's keys takes milliseconds, after which the old owner answers MOVED.
- CLUSTERDOWN, or a slot no known node covers: a failover is under way; the
  slot map is read again, after a pause, until a node serves the slot.

Each is given REDIRECT_PATIENCE_S in all; after that the refusal is raised
(failures.wrapped() makes it a BrokerNotSent: nothing ran). A connection
error is never retried here (the command may have run): it marks the slot
map stale, so the caller's next attempt, after its own back-off, first reads
the map again and so finds a promoted replica.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis.exceptions as rexc
from redis.cluster import RedisCluster

from smqsup.store.core import failures, routing
from smqsup.store.core.routing import (
    DOWN_PAUSE_S,
    MIGRATING_PAUSE_S,
    REDIRECT_PATIENCE_S,
    REFRESH_MIN_INTERVAL_S,
    key_of,
)
from smqsup.store.sync import connection, held

T = TypeVar("T")


#: Refusals that mean the command did not run.
REDIRECTIONS = failures.REDIRECTIONS


class Router:
    """The slot map of one RedisCluster, kept right: corrected after a
    redirection, read again after a connection error (at most every
    REFRESH_MIN_INTERVAL_S). Thread-safe."""

    def __init__(self, cluster: RedisCluster) -> None:
        self.cluster = cluster
        self._lock = threading.Lock()
        self._stale = False
        self._read_at = 0.0

    def node_client(self, key: Any) -> Any:
        """The redis.Redis of the master that serves ``key``'s slot."""
        if self._stale:
            self.refresh()
        node = self.cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]
        return self.cluster.get_redis_connection(node)

    def lost_connection(self) -> None:
        """A node could not be reached: read the map before the next command."""
        self._stale = True

    def refresh(self, *, force: bool = False) -> None:
        with self._lock:
            if not force and time.monotonic() - self._read_at < REFRESH_MIN_INTERVAL_S:
                return
            try:
                self.cluster.nodes_manager.initialize()
                self._stale = False
            except (rexc.RedisError, rexc.RedisClusterException, OSError):
                # No node answers yet, or the slots are not all covered (a
                # failover under way): the caller's command fails, it retries.
                self._stale = True
            self._read_at = time.monotonic()

    def routed(self, send: Callable[[], T]) -> T:
        """``send()`` again after each redirection until it is not refused
        (see the module's docstring), for up to REDIRECT_PATIENCE_S."""
        deadline = 0.0  # set at the first refusal: the hot path reads no clock
        while True:
            try:
                return send()
            except REDIRECTIONS as exc:
                now = time.monotonic()
                deadline = deadline or now + REDIRECT_PATIENCE_S
                if now >= deadline:
                    raise
                self.follow(exc)
            except (rexc.ConnectionError, rexc.TimeoutError, OSError):
                self.lost_connection()
                raise

    def follow(self, exc: Exception) -> None:
        """Act on a redirection before the command is sent again."""
        if isinstance(exc, rexc.MovedError):  # a subclass of AskError: first
            with self._lock:
                self.cluster.nodes_manager.move_slot(exc)
        elif isinstance(exc, (rexc.AskError, rexc.TryAgainError)):
            time.sleep(MIGRATING_PAUSE_S)
        else:
            time.sleep(DOWN_PAUSE_S)
            self.refresh(force=True)


class ClusterHeldConnection(held.ScriptCalls):
    """HeldConnection's interface on a cluster: one HeldConnection per master, each command
    sent on the one of the master serving its key, redirections followed
    (Router.routed). The commands of one execute_many() share a slot."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._lines: dict[int, tuple[Any, held.HeldConnection]] = {}
        self._lock = threading.Lock()
        #: Per thread, the line its last command went on (WAIT must follow it).
        self._last = threading.local()

    def _line(self, key: Any) -> held.HeldConnection:
        client = self._router.node_client(key)
        entry = self._lines.get(id(client))
        if entry is None or entry[0] is not client:
            with self._lock:
                entry = self._lines.get(id(client))
                if entry is None or entry[0] is not client:
                    entry = self._lines[id(client)] = (client, held.HeldConnection(client))
        self._last.line = entry[1]
        return entry[1]

    def execute(self, *args: Any) -> Any:
        return self._router.routed(lambda: self._line(key_of(args)).execute(*args))

    def execute_many(self, *commands: Sequence[Any], raise_error: bool = True) -> list[Any]:
        """HeldConnection.execute_many on the master of the first command's key. Sent
        again only when every command was refused by a redirection (then none
        ran); when only some were, the others ran: the refusals are left in
        place, or (``raise_error``) raised as a plain ResponseError, never
        sent again."""
        key = key_of(commands[0])

        def send() -> list[Any]:
            replies = self._line(key).execute_many(*commands, raise_error=False)
            if replies and all(isinstance(r, REDIRECTIONS) for r in replies):
                raise replies[0]
            return replies
        replies = self._router.routed(send)
        error = next((r for r in replies if isinstance(r, rexc.ResponseError)), None)
        if error is not None and raise_error:
            if isinstance(error, REDIRECTIONS):
                raise rexc.ResponseError(f"partly refused by the cluster, the rest ran: {error}")
            raise error
        return replies

    def wait(self, key: Any, replicas: int, timeout_ms: int) -> int:
        """WAIT on the connection this thread's last command went on (the
        write it confirms; ``key`` is the one it was routed by, for a
        thread that has sent nothing yet)."""
        line = getattr(self._last, "line", None) or self._line(key)
        return int(line.execute("WAIT", replicas, timeout_ms))

    def close(self) -> None:
        for _, line in list(self._lines.values()):
            line.close()


def send(router: Router, batch: Any, deliver: Callable[[Any, Any, Sequence[int]], list[Any]]) -> list[Any]:
    """Send a batch whose commands may live on several masters: one round trip
    per master (``deliver(node client, connection, indexes)`` sends the
    commands at ``indexes`` on that connection and returns their replies).
    A command refused by a redirection is sent again on its own (Router.routed);
    one that ran is never sent twice. A master that cannot be reached leaves
    its exception as the reply of each of its commands; NotSent is raised only
    when no command could be sent at all."""
    groups = routing.grouped(range(len(batch)), lambda i: router.node_client(batch.key(i)), id)
    replies = routing.placed(len(batch), groups, [_to_master(router, client, where, deliver) for client, where in groups])
    again = routing.refused(replies)
    for i in again:
        replies[i] = _again(router, batch, i, replies[i])
    return routing.settled(batch, replies, again)


def _to_master(router: Router, client: Any, indexes: Sequence[int],
               deliver: Callable[[Any, Any, Sequence[int]], list[Any]]) -> list[Any]:
    """The replies of the commands at ``indexes``, sent in one round trip to
    ``client``'s master; if it could not be reached, the exception as the
    reply of each (the NotSent of checkout() when nothing was sent)."""
    try:
        conn = connection.checkout(client)
    except failures.NotSent as exc:
        router.lost_connection()
        return [exc] * len(indexes)
    try:
        return deliver(client, conn, indexes)
    except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
        router.lost_connection()
        return [exc] * len(indexes)


def _again(router: Router, batch: Any, i: int, refusal: Exception) -> Any:
    """Command ``i`` of the batch, refused by a redirection, sent again alone."""
    try:
        router.follow(refusal)
        return router.routed(lambda: batch.run_one(router.node_client(batch.key(i)), i))
    except rexc.ResponseError as exc:
        return exc
    except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
        return exc
    except rexc.RedisClusterException as exc:  # no slot map to follow; others in the batch may have run
        return rexc.ConnectionError(f"Redis Cluster: {exc}")
