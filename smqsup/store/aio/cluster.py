"""Redis Cluster on redis.asyncio, for store/aio/broker.py: the slot map kept
right and a batch sent per master (sync/cluster.py's Router and send(), for
coroutines), and the one round trip on a connection both modules make.

The rules are core/routing.py's: a command a redirection refused (it did not
run) is sent again after following it, for up to REDIRECT_PATIENCE_S; a
connection error is never retried (the command may have run), it marks the
slot map stale, read again before the next command.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, cast

import redis.exceptions as rexc

from smqsup.store import scripts
from smqsup.store.core import routing
from smqsup.store.core.failures import REDIRECTIONS, NotSent

#: Errors of a connection (after which it is not used again as it is).
LOST = (rexc.ConnectionError, rexc.TimeoutError, OSError)


async def connected(conn: Any) -> None:
    """Connect ``conn`` if it is not, and afresh if the server closed it
    while idle (a restart), as redis.asyncio's pool does before handing a
    connection out: a failure here certainly sent nothing."""
    await conn.connect()
    # can_read() from redis-py 8 on; can_read_destructive() before (deprecated since).
    readable = getattr(conn, "can_read", None) or conn.can_read_destructive
    try:
        if await readable():
            raise rexc.ConnectionError("an idle connection has data: the server closed it")
    except LOST:
        await conn.disconnect()
        await conn.connect()


async def exchange(conn: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` in one write on ``conn`` and read every reply, an
    error reply left in its place (the connection stays in step)."""
    await conn.send_packed_command(conn.pack_commands(commands))
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(await conn.read_response())
        except rexc.ResponseError as exc:
            replies.append(exc)
    return replies


async def deliver(conn: Any, batch: scripts.Batch, indexes: Sequence[int]) -> list[Any]:
    """The commands of ``batch`` at ``indexes`` sent on ``conn``, their
    replies read by their calls. A script call NOSCRIPT refused (it did not
    run) goes again by its text, then the batch's WAITs again after it (a
    WAIT confirms the writes before it on its connection), as
    scripts.Batch.deliver does."""
    try:
        replies = await exchange(conn, [batch.args(i) for i in indexes])
        unknown = [n for n, i in enumerate(indexes)
                   if batch.call(i) is not None and isinstance(replies[n], rexc.NoScriptError)]
        if unknown:
            calls = [cast(scripts.Call[Any], batch.call(indexes[n])) for n in unknown]
            waits = [n for n, i in enumerate(indexes) if batch.is_wait(i)]
            again = await exchange(conn, [("EVAL", c.script.text, len(c.keys), *c.keys, *c.args) for c in calls]
                                    + [batch.args(indexes[n]) for n in waits])
            for n, reply in zip(unknown + waits, again):
                replies[n] = reply
    except BaseException:
        # Cancelled or broken mid-exchange: replies may be unread, so the
        # connection is out of step; it connects afresh at its next use.
        await conn.disconnect(nowait=True)
        raise
    return [batch.read(i, reply) for i, reply in zip(indexes, replies)]


class AsyncRouter:
    """The slot map of one redis.asyncio RedisCluster, and batches sent per
    master by it (see the module's docstring). One event loop's."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self._map_read_at = 0.0
        self._map_stale = False

    async def send(self, batch: scripts.Batch) -> list[Any]:
        """sync/cluster.py's send() on redis.asyncio: the commands grouped by the
        master of their key, each group in one round trip (the groups at
        once); a master that cannot be reached leaves its exception as the
        reply of each of its commands (NotSent raised when nothing could be
        sent); a command a redirection refused is sent again alone, and then
        a WAIT in the batch confirms nothing (its reply: 0)."""
        groups = await self._by_master(batch, range(len(batch)))
        sent = await asyncio.gather(*(self._to_master(node, batch, where) for node, where in groups))
        replies = routing.placed(len(batch), groups, sent)
        again = routing.refused(replies)
        for i in again:
            replies[i] = await self._again(batch, i, replies[i])
        return routing.settled(batch, replies, again)

    async def _by_master(self, batch: scripts.Batch, indexes: Sequence[int]) -> list[tuple[Any, list[int]]]:
        """(master, positions of its commands) for the commands at ``indexes``,
        the slot map read first if there is none yet or it is stale. NotSent
        if no node serves it (none answers, or a slot is not covered)."""
        client = self.client
        try:
            await client.initialize()
            if self._map_stale:
                await self._read_map()
            return routing.grouped(indexes, lambda i: client.get_node_from_key(batch.key(i)), lambda node: node.name)
        except (*LOST, rexc.RedisClusterException) as exc:
            self._map_stale = True
            raise NotSent(f"no node of the Redis Cluster serves the keys: {exc}") from exc

    async def _to_master(self, node: Any, batch: scripts.Batch, indexes: Sequence[int]) -> list[Any]:
        """The replies of the commands at ``indexes``, sent in one round trip
        to ``node``; if it could not be reached, the exception as the reply
        of each (NotSent when nothing was sent)."""
        conn = node.acquire_connection()
        try:
            try:
                await connected(conn)
            except LOST as exc:
                self._map_stale = True
                return [NotSent(str(exc))] * len(indexes)
            try:
                return await deliver(conn, batch, indexes)
            except LOST as exc:
                self._map_stale = True
                return [exc] * len(indexes)
        finally:
            node.release(conn)

    async def _again(self, batch: scripts.Batch, i: int, refusal: Exception) -> Any:
        """Command ``i``, refused by a redirection, sent again alone (after
        following it) until it is not refused, for up to REDIRECT_PATIENCE_S."""
        deadline = time.monotonic() + routing.REDIRECT_PATIENCE_S
        reply: Any = refusal
        while isinstance(reply, REDIRECTIONS) and time.monotonic() < deadline:
            if isinstance(reply, (rexc.AskError, rexc.TryAgainError)) and not isinstance(reply, rexc.MovedError):
                await asyncio.sleep(routing.MIGRATING_PAUSE_S)  # a slot being migrated: done in ms
            else:
                # MOVED (the slot has moved) or CLUSTERDOWN (a failover under way): the map read again.
                moved = isinstance(reply, rexc.MovedError)
                await asyncio.sleep(routing.MIGRATING_PAUSE_S if moved else routing.DOWN_PAUSE_S)
                self._map_stale = True
            try:
                (node, where), = await self._by_master(batch, [i])
            except NotSent as exc:
                return exc
            reply = (await self._to_master(node, batch, where))[0]
        return reply

    async def _read_map(self) -> None:
        """Read the slot map again, at most every REFRESH_MIN_INTERVAL_S."""
        if time.monotonic() - self._map_read_at < routing.REFRESH_MIN_INTERVAL_S:
            return
        self._map_read_at = time.monotonic()
        await self.client.nodes_manager.initialize()
        self._map_stale = False
