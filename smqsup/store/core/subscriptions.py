"""The protocol of the waits' shared subscription, written once without I/O
for both drivers (sync/subscriber.py on a thread, aio/subscriber.py on asyncio): which
SUBSCRIBE / UNSUBSCRIBE to send, and what a confirmation or a publication
read from the connection means to each waiter.

Redis answers a connection's commands in order, so the confirmations of a
channel are counted: a watch is subscribed by the confirmation of the
SUBSCRIBE sent after its channel's last UNSUBSCRIBE, never by an older
one's (a waiter that came as the last one left would otherwise read its
record before its own SUBSCRIBE took effect, and miss an end published
in between). The drivers make the events (threading.Event or
asyncio.Event: anything with set()), send what this says, in the order it
says it, and hand it every reply they read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Generic, Optional, Protocol, TypeVar

import redis.exceptions as rexc


class Settable(Protocol):
    """What a driver's event is to the protocol."""

    def set(self) -> None: ...


E = TypeVar("E", bound=Settable)


class Watch(Generic[E]):
    """One waiter's view of one channel: ``needs`` is the count of the
    channel's confirmations after which it is subscribed."""

    __slots__ = ("channel", "needs", "subscribed", "changed", "lost", "refused")

    def __init__(self, channel: str, needs: int, subscribed: E, changed: E) -> None:
        self.channel = channel
        self.needs = needs
        self.subscribed = subscribed
        self.changed = changed
        self.lost = False
        #: Redis's refusal of a SUBSCRIBE (the connection then counts as lost).
        self.refused: Optional[Exception] = None


class _Channel(Generic[E]):
    """A channel's watches, SUBSCRIBEs sent and confirmed on the current connection."""

    __slots__ = ("watches", "sent", "confirmed")

    def __init__(self) -> None:
        self.watches: list[Watch[E]] = []
        self.sent = 0
        self.confirmed = 0


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Channels(Generic[E]):
    """The watches of one subscription connection (see the module's
    docstring). Not thread-safe: a threaded driver holds its lock."""

    def __init__(self, make_event: Callable[[], E]) -> None:
        self._event = make_event
        self._channels: dict[str, _Channel[E]] = {}

    def watch(self, channel: str) -> tuple[Watch[E], bool]:
        """A new watch of ``channel``, and whether the driver sends SUBSCRIBE
        (its first watch); subscribed at once when its channel's last
        SUBSCRIBE was confirmed already."""
        ch = self._channels.setdefault(channel, _Channel())
        subscribe = not ch.watches
        if subscribe:
            ch.sent += 1
        w = Watch(channel, ch.sent, self._event(), self._event())
        if ch.confirmed >= w.needs:
            w.subscribed.set()
        ch.watches.append(w)
        return w, subscribe

    def unwatch(self, w: Watch[E]) -> bool:
        """Forget ``w``; whether the driver sends UNSUBSCRIBE (its channel's
        last watch; nothing for a watch lost with its connection)."""
        ch = self._channels.get(w.channel)
        if ch is None or w not in ch.watches:
            return False
        ch.watches.remove(w)
        if ch.watches:
            return False
        self._forget_if_idle(w.channel, ch)
        return True

    def _forget_if_idle(self, channel: str, ch: _Channel[E]) -> None:
        """Drop a channel no one watches once its SUBSCRIBEs are all confirmed
        (a confirmation still coming must find the count it belongs to)."""
        if not ch.watches and ch.confirmed >= ch.sent:
            self._channels.pop(channel, None)

    def heard(self, kind: Any, channel: Any) -> None:
        """A reply read from the connection: a "subscribe" confirmation (the
        watches it completes are subscribed) or a "message" published on
        ``channel`` (its watches changed); anything else means nothing."""
        name = _text(channel)
        ch = self._channels.get(name)
        if ch is None:
            return
        if _text(kind) == "subscribe":
            ch.confirmed += 1
            for w in ch.watches:
                if w.needs <= ch.confirmed:
                    w.subscribed.set()
            self._forget_if_idle(name, ch)
        elif _text(kind) == "message":
            for w in ch.watches:
                w.changed.set()

    def lost(self, refusal: Optional[Exception] = None) -> None:
        """The connection is gone (``refusal``: Redis refused a command): every
        watch is told and woken, and forgotten (the next connection starts afresh)."""
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            for w in ch.watches:
                w.lost, w.refused = True, refusal
                w.subscribed.set()
                w.changed.set()

    def any_watched(self) -> bool:
        return bool(self._channels)


def ended_by(exc: BaseException, log: logging.Logger) -> Optional[Exception]:
    """What a reading of the subscription that raised ``exc`` ended with:
    Redis's refusal of one of its commands (told to every waiter: none
    subscribes again), or None for any other failure (every waiter reads
    again, on a new connection); said at debug level either way."""
    if isinstance(exc, rexc.ResponseError):
        log.debug("Redis refused a command of the waits' subscription", exc_info=exc)
        return exc
    log.debug("the waits' subscription failed", exc_info=exc)
    return None
