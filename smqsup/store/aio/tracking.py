"""Tracked messages on redis.asyncio, for the AsyncProducer: the driver of
plans.py's reads, cancels and waits (what they decide is written once,
there, for both stores; this only sends and receives). Each round trip a
plan yields is one Batch sent through the AsyncBroker's _send under its
turns; a wait's subscription steps go to the one subscription connection
and reading task the waits of an AsyncBroker share (aio/subscriber.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Optional, TypeVar

from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.aio.subscriber import AsyncSubscriber
from smqsup.store.core import plans
from smqsup.store.core.declared import PartitionCache, names_of
from smqsup.store.core.failures import wrapped
from smqsup.store.core.records import Record

T = TypeVar("T")


async def run(plan: "plans.WaitPlan[T]", what: str, client: Any, send: Callable[[scripts.Batch], Awaitable[list[Any]]],
              subscriber: Optional[AsyncSubscriber] = None, turns: Optional[asyncio.Semaphore] = None) -> T:
    """Session.run() on redis.asyncio: drive ``plan`` (core/plans.py), each
    round trip it yields sent as one Batch of ``client`` through ``send``
    (taking one of ``turns`` when given, but for a Blocking one), its
    replies sent back; its subscription steps performed by ``subscriber``
    (its watch dropped whatever happens); errors as smqsup's, saying ``what``."""
    stepper: plans.Stepper[T] = plans.Stepper(plan)
    reply: Any = None
    try:
        with wrapped(what):
            while (step := stepper.next(reply)) is not None:
                if plans.on_subscription(step):
                    assert subscriber is not None, "a plan that subscribes needs a subscriber"
                    reply = await subscriber.perform(step, stepper)
                elif turns is None or isinstance(step, plans.Blocking):
                    reply = await send(plans.fill(scripts.Batch(client), step))
                else:
                    async with turns:
                        reply = await send(plans.fill(scripts.Batch(client), step))
            return stepper.answer
    finally:
        if stepper.watch is not None and subscriber is not None:
            subscriber.unwatch(stepper.watch)


class AsyncTracking:
    """Reads, cancels and waits of tracked messages, for one AsyncBroker:
    ``send`` its round trip, ``keys`` its keys, ``turns`` the limit its
    round trips take turns under, ``open_connection`` the maker of the
    waits' subscription connection."""

    def __init__(self, client: Any, send: Callable[[scripts.Batch], Awaitable[list[Any]]],
                 keys: Callable[[str], QueueKeys], turns: asyncio.Semaphore,
                 open_connection: Callable[[], Awaitable[Any]], cache: PartitionCache) -> None:
        self._client = client
        self._send = send
        self._keys = keys
        self._turns = turns
        self._subscriber = AsyncSubscriber(open_connection)
        self._cache = cache

    async def record(self, queue: str, message_id: str, wait_s: float = 0.0) -> Optional[Record]:
        """Tracking.record(), awaited."""
        names = names_of(self._cache, self._keys(queue), queue)
        return await self.run(plans.record(self._keys, names, message_id, wait_s),
                              f"read message {message_id!r} of {queue!r}")

    async def cancel_message(self, queue: str, message_id: str) -> str:
        """Tracking.cancel_message(), awaited."""
        names = names_of(self._cache, self._keys(queue), queue)
        return await self.run(plans.cancel_in(self._keys, names, message_id),
                              f"cancel message {message_id!r} of {queue!r}")

    async def run(self, plan: "plans.WaitPlan[T]", what: str) -> T:
        """Drive ``plan`` under the turns, its subscription steps on the shared subscription."""
        return await run(plan, what, self._client, self._send, self._subscriber, self._turns)

    async def close(self) -> None:
        """Close the waits' shared subscription and its tasks."""
        await self._subscriber.close()
