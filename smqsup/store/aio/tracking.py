"""Tracked messages on redis.asyncio, for the AsyncProducer: the driver of
plans.py's reads, cancels and waits (what they decide is written once,
there, for both stores; this only sends and receives). Each round trip a
plan yields is one Batch sent through the AsyncBroker's _send under its
turns; a wait's subscription steps go to the one subscription connection
and reading task the waits of an AsyncBroker share (aio/subscriber.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Optional, TypeVar

from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.aio.subscriber import AsyncSubscriber, AsyncWatch
from smqsup.store.core import plans
from smqsup.store.core.records import Record
from smqsup.store.sync.connection import wrapped

T = TypeVar("T")


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for ``event`` at most ``timeout_s``."""
    if event.is_set() or timeout_s <= 0:
        return
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        pass


class AsyncTracking:
    """Reads, cancels and waits of tracked messages, for one AsyncBroker:
    ``send`` its round trip, ``keys`` its keys, ``turns`` the limit its
    round trips take turns under, ``open_connection`` the maker of the
    waits' subscription connection."""

    def __init__(self, client: Any, send: Callable[[scripts.Batch], Awaitable[list[Any]]],
                 keys: Callable[[str], QueueKeys], turns: asyncio.Semaphore,
                 open_connection: Callable[[], Awaitable[Any]]) -> None:
        self._client = client
        self._send = send
        self._keys = keys
        self._turns = turns
        self._subscriber = AsyncSubscriber(open_connection)

    async def run(self, plan: "plans.WaitPlan[T]") -> T:
        """Drive ``plan`` (plans.py): each round trip it yields sent as one
        Batch, under the turns; its subscription steps on the shared
        subscription (its watch dropped whatever happens)."""
        reply: Any = None
        w: Optional[AsyncWatch] = None
        try:
            while True:
                try:
                    step = plan.send(reply)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
                reply = None
                if isinstance(step, plans.Subscribe):
                    w = reply = await self._subscriber.watch(step.channel)
                    await _until(w.subscribed, step.seconds)
                elif isinstance(step, plans.Pause):
                    assert w is not None
                    await _until(w.changed, step.seconds)
                    w.changed.clear()
                elif isinstance(step, plans.Unsubscribe):
                    assert w is not None
                    self._subscriber.unwatch(w)
                    w = None
                else:
                    batch = plans.fill(scripts.Batch(self._client), step)
                    async with self._turns:
                        reply = await self._send(batch)
        finally:
            if w is not None:
                self._subscriber.unwatch(w)

    async def find(self, names: Sequence[str], message_id: str) -> Optional[tuple[str, Record]]:
        """tracking.Tracking.find(), awaited: the partition (among ``names``)
        holding the record of ``message_id``, and the record; None when none does."""
        with wrapped(f"read message {message_id!r} of {names[0]!r}"):
            return await self.run(plans.find(self._keys, names, message_id))

    async def wait(self, name: str, message_id: str, timeout_s: float) -> Optional[Record]:
        """tracking.Tracking.wait(), awaited (plans.end()): the record of
        ``message_id`` in partition ``name`` once it is final, or as it is
        when ``timeout_s`` passed first; None once it is gone."""
        with wrapped(f"wait for message {message_id!r} of {name!r}"):
            return await self.run(plans.end(self._keys, name, message_id, timeout_s))

    async def cancel(self, names: Sequence[str], message_id: str) -> str:
        """contents.Contents.cancel(), awaited (plans.cancel())."""
        with wrapped(f"cancel message {message_id!r} of {names[0]!r}"):
            return await self.run(plans.cancel(self._keys, names, message_id))

    async def close(self) -> None:
        """Close the waits' shared subscription and its tasks."""
        await self._subscriber.close()
