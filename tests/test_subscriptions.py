"""The waits' shared subscription protocol (store/core/subscriptions.py), one for
both clients: a watch is subscribed by its own SUBSCRIBE's confirmation,
never by one sent before its channel's last UNSUBSCRIBE. The threaded
driver is checked through a stand-in connection that hands out exactly the
replies the test puts (the order Redis would answer in); the real
connections are tested by test_results.py and test_async_results.py."""

from __future__ import annotations

import queue
import threading
from typing import Any, Optional

from smqsup.store.core.subscriptions import Channels
from smqsup.store.sync.subscriber import Subscriber
from tests.support.helpers import wait_for


class _PubSub:
    """redis-py's PubSub as the threaded driver uses it: commands recorded,
    replies handed out as the test queues them."""

    def __init__(self, sent: list[tuple[str, str]], replies: "queue.Queue[dict[str, Any]]") -> None:
        self._sent, self._replies = sent, replies

    def subscribe(self, channel: str) -> None:
        self._sent.append(("subscribe", channel))

    def unsubscribe(self, channel: str) -> None:
        self._sent.append(("unsubscribe", channel))

    def get_message(self, timeout: float) -> Optional[dict[str, Any]]:
        try:
            return self._replies.get(timeout=timeout)
        except queue.Empty:
            return None

    def close(self) -> None:
        pass


def _reply(kind: str, channel: str) -> dict[str, Any]:
    return {"type": kind, "channel": channel.encode(), "data": 1}


def test_a_stale_confirmation_does_not_subscribe_a_watch_that_came_after_an_unsubscribe() -> None:
    """Watch, unwatch, watch again before Redis confirmed: the first SUBSCRIBE's confirmation leaves the new
    watch unsubscribed (an end published before its own SUBSCRIBE would be missed); its own confirms it."""
    sent: list[tuple[str, str]] = []
    replies: "queue.Queue[dict[str, Any]]" = queue.Queue()
    sub = Subscriber(lambda: _PubSub(sent, replies))
    other = sub.watch("d")
    first = sub.watch("c")
    sub.unwatch(first)
    again = sub.watch("c")
    assert sent == [("subscribe", "d"), ("subscribe", "c"), ("unsubscribe", "c"), ("subscribe", "c")]
    for reply in (_reply("subscribe", "d"), _reply("subscribe", "c"), _reply("unsubscribe", "c"),
                  _reply("message", "d")):
        replies.put(reply)
    wait_for(other.changed.is_set)  # (the replies before it were read first)
    assert other.subscribed.is_set() and not again.subscribed.is_set()
    replies.put(_reply("subscribe", "c"))
    wait_for(again.subscribed.is_set)
    sub.close()


def test_the_protocol_counts_confirmations_per_channel_and_forgets_idle_ones() -> None:
    """Channels: the first watch sends SUBSCRIBE, later ones ride on it; the last unwatch sends UNSUBSCRIBE;
    a publication changes only its channel's watches; a lost connection wakes and forgets every watch."""
    channels: Channels[threading.Event] = Channels(threading.Event)
    a, send_a = channels.watch("a")
    b, send_b = channels.watch("a")
    assert send_a and not send_b and not a.subscribed.is_set()
    channels.heard(b"subscribe", b"a")
    c, send_c = channels.watch("a")
    assert a.subscribed.is_set() and b.subscribed.is_set() and c.subscribed.is_set() and not send_c
    channels.heard("message", "b")
    assert not a.changed.is_set()
    channels.heard("message", "a")
    assert a.changed.is_set() and c.changed.is_set()
    assert not channels.unwatch(a) and not channels.unwatch(b) and channels.unwatch(c)
    assert not channels.any_watched()
    d, _ = channels.watch("x")
    channels.lost(ValueError("NOPERM"))
    assert d.lost and isinstance(d.refused, ValueError) and d.subscribed.is_set() and d.changed.is_set()
    assert not channels.unwatch(d) and not channels.any_watched()
