"""One pub/sub connection shared by every wait of a process on tracked
messages (store/ops/tracking.py): a thousand threads waiting cost one
connection and one reading thread, not a thousand connections.

    waiter threads ──SUBSCRIBE / UNSUBSCRIBE (sends only, under a lock)──▶ the connection
    the reading thread ◀── confirmations, published states ── the connection
                       └─▶ each Watch of that channel: subscribed, changed

A waiter watches a channel, waits for ``subscribed`` (Redis confirmed the
subscription: anything published from then on reaches it), reads the
record, and waits for ``changed`` before it reads again. If the connection
fails, every watch is told (``lost``) and woken; a waiter that still waits
watches again, on a new connection. If Redis refuses a SUBSCRIBE (an ACL
without the channels: NOPERM), every watch is told that too (``refused``):
watching again would only be refused again. What to send and what each
reply means is subscriptions.py's, the asyncio driver's too (aio/subscriber.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Optional

from smqsup.store.core import plans, subscriptions

log = logging.getLogger(__name__)

#: Longest the reading thread blocks at once, s (how soon it sees close()).
_READ_S = 1.0


#: One waiter's view of one channel (subscriptions.Watch, its events threading's).
Watch = subscriptions.Watch[threading.Event]


class Subscriber:
    """The shared subscription of one Broker: subscriptions.Channels says
    what to send and what each reply means; this sends and reads, on
    redis-py's PubSub and one reading thread. Thread-safe."""

    def __init__(self, open_pubsub: Callable[[], Any]) -> None:
        self._open = open_pubsub
        self._lock = threading.Lock()
        self._channels: subscriptions.Channels[threading.Event] = subscriptions.Channels(threading.Event)
        self._pubsub: Any = None
        self._reader: Optional[threading.Thread] = None

    def watch(self, channel: str) -> Watch:
        """Start watching ``channel``; the watch's ``subscribed`` is set once
        Redis confirmed its SUBSCRIBE (at once when another waiter's was).
        Raises what the connection raises when the SUBSCRIBE cannot be sent."""
        with self._lock:
            if self._pubsub is None:
                self._pubsub = self._open()
            w, subscribe = self._channels.watch(channel)
            if subscribe:
                try:
                    self._pubsub.subscribe(channel)
                except Exception:
                    self._channels.unwatch(w)
                    raise
            if self._reader is None:
                self._reader = threading.Thread(target=self._read, args=(self._pubsub,), daemon=True,
                                                name="smqsup-waits")
                self._reader.start()
        return w

    def perform(self, step: object, stepper: "plans.Stepper[Any]") -> Optional[Watch]:
        """A plan's subscription step (Session.run): Subscribe watches its
        channel (waiting for Redis to confirm) and gives the watch, Pause
        waits for a change, Unsubscribe drops the watch."""
        if isinstance(step, plans.Unsubscribe):
            self.unwatch(stepper.dropped())
            return None
        if isinstance(step, plans.Subscribe):
            stepper.watch = self.watch(step.channel)
        event, seconds = stepper.waits_on(step)
        event.wait(seconds)
        return stepper.waited(step)  # type: ignore[no-any-return]

    def unwatch(self, w: Watch) -> None:
        """Stop watching (the last waiter of a channel unsubscribes it)."""
        with self._lock:
            if self._channels.unwatch(w) and self._pubsub is not None:
                try:
                    self._pubsub.unsubscribe(w.channel)
                except Exception:  # noqa: BLE001 - the reader sees the connection fail and starts over
                    log.debug("unsubscribe of %s failed", w.channel, exc_info=True)

    def _read(self, pubsub: Any) -> None:
        """The reading thread: hand each confirmation and publication to the
        watches of its channel, until the connection fails or is closed."""
        ended: Optional[Exception] = None
        try:
            while self._pubsub is pubsub:  # (close() or a failure replaces it)
                message = pubsub.get_message(timeout=_READ_S)
                if message is not None:
                    self._deliver(message)
        except Exception as exc:  # noqa: BLE001 - any failure ends this connection (subscriptions.ended_by)
            ended = subscriptions.ended_by(exc, log)
        self._lost(pubsub, ended)

    def _deliver(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._channels.heard(message.get("type"), message.get("channel"))

    def _lost(self, pubsub: Any, refusal: Optional[Exception] = None) -> None:
        """The connection is gone (failed, closed, or a command refused:
        ``refusal``): wake every watch, marked lost; the next watch() opens
        another."""
        with self._lock:
            if self._pubsub is pubsub:
                self._pubsub, self._reader = None, None
                self._channels.lost(refusal)
        try:
            pubsub.close()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass

    def close(self) -> None:
        """Close the connection (its waiters read again, on a new one if
        they still wait); the reading thread ends with it."""
        with self._lock:
            pubsub, self._pubsub, self._reader = self._pubsub, None, None
            self._channels.lost()
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
