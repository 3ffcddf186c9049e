"""One pub/sub connection and one reading task shared by every wait of an
AsyncProducer on tracked messages (aio/tracking.py): sync/subscriber.py's
Subscriber for asyncio, a thousand waits costing one connection.

    waiters ──watch / unwatch (no await once connected)──▶ outbox ──the sending task──▶ SUBSCRIBE / UNSUBSCRIBE
    the reading task ◀── confirmations, published states ── the connection
                     └─▶ each AsyncWatch of that channel: subscribed, changed (asyncio.Events)

A waiter watches a channel, waits for ``subscribed`` (Redis confirmed the
SUBSCRIBE it needs: anything published from then on reaches it), reads
the record, and waits for ``changed`` before it reads again. Redis answers
a connection's commands in order, so the confirmations of a channel are
counted: a watch waits for the confirmation of the SUBSCRIBE sent after
the channel's last UNSUBSCRIBE, never an older one's (subscriptions.py:
the protocol, the threaded driver's too). watch() and unwatch()
only queue their commands (one sending task writes them in order), so a
waiter cancelled between the two leaves no command half sent. If the
connection fails, every watch is told (``lost``) and woken; a waiter that
still waits watches again, on a new connection. If Redis refuses a
SUBSCRIBE (an ACL without the channels: NOPERM), every watch is told that
too (``refused``): watching again would only be refused again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from smqsup.store.core import plans, subscriptions

log = logging.getLogger(__name__)

#: Longest the reading task blocks in one read, s (then it reads again; close() cancels it).
_READ_S = 60.0


#: One waiter's view of one channel (subscriptions.Watch, its events asyncio's).
AsyncWatch = subscriptions.Watch[asyncio.Event]


class AsyncSubscriber:
    """The shared subscription of one AsyncBroker (see the module's
    docstring); ``open_connection`` makes the connection (not connected,
    not a pool's). One event loop's."""

    def __init__(self, open_connection: Callable[[], Awaitable[Any]]) -> None:
        self._open = open_connection
        self._conn: Any = None
        self._opening: Optional[asyncio.Future[None]] = None
        self._sending = False
        self._outbox: list[tuple[str, str]] = []
        self._channels: subscriptions.Channels[asyncio.Event] = subscriptions.Channels(asyncio.Event)
        #: The reading and sending tasks (close() cancels them).
        self._tasks: set[asyncio.Task[None]] = set()

    async def watch(self, channel: str) -> AsyncWatch:
        """Start watching ``channel`` (see the module's docstring). Raises
        what redis-py raises when the connection cannot be made."""
        await self._connected()
        w, subscribe = self._channels.watch(channel)
        if subscribe:
            self._command("SUBSCRIBE", channel)
        return w

    async def perform(self, step: object, stepper: "plans.Stepper[Any]") -> Optional[AsyncWatch]:
        """Subscriber.perform(), awaited: a plan's Subscribe, Pause or Unsubscribe."""
        if isinstance(step, plans.Unsubscribe):
            self.unwatch(stepper.dropped())
            return None
        if isinstance(step, plans.Subscribe):
            stepper.watch = await self.watch(step.channel)
        await _until(*stepper.waits_on(step))
        return stepper.waited(step)  # type: ignore[no-any-return]

    def unwatch(self, w: AsyncWatch) -> None:
        """Stop watching (the last waiter of a channel unsubscribes it). Never awaits."""
        if self._channels.unwatch(w):
            self._command("UNSUBSCRIBE", w.channel)

    async def _connected(self) -> None:
        """Make the connection and start its reading task if there is none;
        callers awaiting together share one attempt."""
        while self._conn is None:
            if self._opening is None:
                opening = self._opening = asyncio.ensure_future(self._connect())
                opening.add_done_callback(self._opened)
            # Shielded: one waiter cancelled does not cancel the others' connecting.
            await asyncio.shield(self._opening)

    async def _connect(self) -> None:
        conn = await self._open()
        try:
            await conn.connect()
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        self._conn = conn
        self._start(self._read(conn))

    def _opened(self, done: "asyncio.Future[None]") -> None:
        """An attempt to connect is over: the next one tries afresh (its error
        is its waiters', and marked seen for when none is left)."""
        self._opening = None
        if not done.cancelled():
            done.exception()

    def _start(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _command(self, command: str, channel: str) -> None:
        """Queue a (UN)SUBSCRIBE for the current connection (none: nothing to
        do); the sending task writes what is queued, in order, batched."""
        if self._conn is None:
            return
        self._outbox.append((command, channel))
        if not self._sending:
            self._sending = True
            self._start(self._send())

    async def _send(self) -> None:
        """The sending task: write the queued commands until none is left. A
        failure is the connection's: every watch is told, as for a read."""
        try:
            while self._outbox and self._conn is not None:
                conn = self._conn
                commands, self._outbox = self._outbox, []
                try:
                    if not conn.is_connected:  # closed under it: never reconnected silently, unsubscribed
                        raise ConnectionError("the waits' connection was closed")
                    await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
                except Exception:  # noqa: BLE001 - any failure: every waiter reads again, on a new connection
                    log.debug("sending to the waits' subscription failed", exc_info=True)
                    await self._drop(conn)
        finally:
            self._sending = False

    async def _read(self, conn: Any) -> None:
        """The reading task: hand each confirmation and publication to the
        watches of its channel, until the connection fails or is closed."""
        ended: Optional[Exception] = None
        try:
            while self._conn is conn:
                reply = await conn.read_response(timeout=_READ_S, push_request=True)
                if reply is not None:
                    self._deliver(reply)
        except Exception as exc:  # noqa: BLE001 - any failure ends this connection (subscriptions.ended_by)
            ended = subscriptions.ended_by(exc, log)
        finally:
            await self._drop(conn, ended)

    def _deliver(self, reply: Any) -> None:
        if isinstance(reply, (list, tuple)) and len(reply) >= 3:
            self._channels.heard(reply[0], reply[1])

    async def _drop(self, conn: Any, refusal: Optional[Exception] = None) -> None:
        """``conn`` is gone (failed, closed, or a command refused: ``refusal``):
        wake every watch, marked lost, and close it; the next watch() makes another."""
        if self._conn is conn:
            self._conn = None
            self._outbox.clear()
            self._channels.lost(refusal)
        await conn.disconnect(nowait=True)

    async def close(self) -> None:
        """Close the connection and end its tasks (its waiters are woken and
        read again, on a new connection if they still wait)."""
        if self._opening is not None:
            await asyncio.wait([self._opening])  # bounded by the connect timeout
        conn = self._conn
        if conn is not None:
            await self._drop(conn)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for ``event`` at most ``timeout_s``."""
    if event.is_set() or timeout_s <= 0:
        return
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        pass
