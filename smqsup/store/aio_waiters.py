"""One pub/sub connection and one reading task shared by every wait of an
AsyncProducer on tracked messages (aio_tracking.py): waiters.py's
Subscriber for asyncio, a thousand waits costing one connection.

    waiters ──watch / unwatch (no await once connected)──▶ outbox ──the sending task──▶ SUBSCRIBE / UNSUBSCRIBE
    the reading task ◀── confirmations, published states ── the connection
                     └─▶ each AsyncWatch of that channel: subscribed, changed (asyncio.Events)

A waiter watches a channel, waits for ``subscribed`` (Redis confirmed the
SUBSCRIBE it needs: anything published from then on reaches it), reads
the record, and waits for ``changed`` before it reads again. Redis answers
a connection's commands in order, so the confirmations of a channel are
counted: a watch waits for the confirmation of the SUBSCRIBE sent after
the channel's last UNSUBSCRIBE, never an older one's. watch() and unwatch()
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

import redis.exceptions as rexc

log = logging.getLogger(__name__)

#: Longest the reading task blocks in one read, s (then it reads again; close() cancels it).
_READ_S = 60.0


class AsyncWatch:
    """One waiter's view of one channel: ``needs`` is the count of the
    channel's confirmations after which it is subscribed."""

    __slots__ = ("channel", "needs", "subscribed", "changed", "lost", "refused")

    def __init__(self, channel: str, needs: int) -> None:
        self.channel = channel
        self.needs = needs
        self.subscribed = asyncio.Event()
        self.changed = asyncio.Event()
        self.lost = False
        #: Redis's refusal of a SUBSCRIBE (the connection then counts as lost).
        self.refused: Optional[Exception] = None


class _Channel:
    """A channel's watches, SUBSCRIBEs sent and confirmed on the current connection."""

    __slots__ = ("watches", "sent", "confirmed")

    def __init__(self) -> None:
        self.watches: set[AsyncWatch] = set()
        self.sent = 0
        self.confirmed = 0


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


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
        self._channels: dict[str, _Channel] = {}
        #: The reading and sending tasks (close() cancels them).
        self._tasks: set[asyncio.Task[None]] = set()

    async def watch(self, channel: str) -> AsyncWatch:
        """Start watching ``channel`` (see the module's docstring). Raises
        what redis-py raises when the connection cannot be made."""
        await self._connected()
        ch = self._channels.get(channel)
        if ch is None:
            ch = self._channels[channel] = _Channel()
        if not ch.watches:
            ch.sent += 1
            self._command("SUBSCRIBE", channel)
        w = AsyncWatch(channel, ch.sent)
        if ch.confirmed >= w.needs:
            w.subscribed.set()
        ch.watches.add(w)
        return w

    def unwatch(self, w: AsyncWatch) -> None:
        """Stop watching (the last waiter of a channel unsubscribes it). Never awaits."""
        ch = self._channels.get(w.channel)
        if ch is None or w not in ch.watches:  # (lost: its connection's channels are gone)
            return
        ch.watches.discard(w)
        if not ch.watches:
            self._command("UNSUBSCRIBE", w.channel)
            self._forget_if_idle(w.channel, ch)

    def _forget_if_idle(self, channel: str, ch: _Channel) -> None:
        """Drop a channel no one watches once its SUBSCRIBEs are all confirmed
        (a confirmation still coming must find the count it belongs to)."""
        if not ch.watches and ch.confirmed >= ch.sent:
            self._channels.pop(channel, None)

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
        try:
            while self._conn is conn:
                reply = await conn.read_response(timeout=_READ_S, push_request=True)
                if reply is not None:
                    self._deliver(reply)
        except rexc.ResponseError as exc:  # a refusal: told to every waiter, none subscribes again
            log.debug("Redis refused a command of the waits' subscription", exc_info=True)
            await self._drop(conn, exc)
        except Exception:  # noqa: BLE001 - any failure: every waiter reads again, on a new connection
            log.debug("the waits' subscription failed", exc_info=True)
        finally:
            await self._drop(conn)

    def _deliver(self, reply: Any) -> None:
        if not isinstance(reply, (list, tuple)) or len(reply) < 3:
            return
        kind, channel = _text(reply[0]), _text(reply[1])
        ch = self._channels.get(channel)
        if ch is None:
            return
        if kind == "subscribe":
            ch.confirmed += 1
            for w in ch.watches:
                if w.needs <= ch.confirmed:
                    w.subscribed.set()
            self._forget_if_idle(channel, ch)
        elif kind == "message":
            for w in ch.watches:
                w.changed.set()

    async def _drop(self, conn: Any, refusal: Optional[Exception] = None) -> None:
        """``conn`` is gone (failed, closed, or a command refused: ``refusal``):
        wake every watch, marked lost, and close it; the next watch() makes another."""
        if self._conn is conn:
            self._conn = None
            self._outbox.clear()
            channels, self._channels = self._channels, {}
            for ch in channels.values():
                for w in ch.watches:
                    w.lost, w.refused = True, refusal
                    w.subscribed.set()
                    w.changed.set()
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
