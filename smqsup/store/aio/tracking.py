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

T = TypeVar("T")


async def run(plan: "plans.WaitPlan[T]", what: str, client: Any, send: Callable[[scripts.Batch], Awaitable[list[Any]]],
              subscriber: Optional[AsyncSubscriber] = None) -> T:
    """Session.run() on redis.asyncio: drive ``plan`` (core/plans.py), each
    round trip it yields sent as one Batch of ``client`` through ``send``,
    its replies sent back; its subscription steps performed by
    ``subscriber``; errors as smqsup's, saying ``what``."""
    stepper: plans.Stepper[T] = plans.Stepper(plan)
    reply: Any = None
    with stepper.driving(what, None if subscriber is None else subscriber.unwatch):
        while (step := stepper.next(reply)) is not None:
            if (by := plans.performer(step, subscriber)) is not None:
                reply = await by.perform(step, stepper)
            else:
                reply = await send(plans.fill(scripts.Batch(client), step))
    return stepper.answer


def taking_turns(send: Callable[[scripts.Batch], Awaitable[list[Any]]],
                 turns: asyncio.Semaphore) -> Callable[[scripts.Batch], Awaitable[list[Any]]]:
    """``send``, each round trip under one of ``turns`` but a blocking one
    (it would hold a turn for its wait)."""
    async def send_in_turn(batch: scripts.Batch) -> list[Any]:
        if batch.blocking:
            return await send(batch)
        async with turns:
            return await send(batch)
    return send_in_turn


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

    async def run(self, plan: "plans.WaitPlan[T]", what: str) -> T:
        """Drive ``plan`` under the turns, its subscription steps on the shared subscription."""
        return await run(plan, what, self._client, taking_turns(self._send, self._turns), self._subscriber)

    async def close(self) -> None:
        """Close the waits' shared subscription and its tasks."""
        await self._subscriber.close()
