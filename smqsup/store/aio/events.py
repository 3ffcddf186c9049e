"""ops/events.py on redis.asyncio: the event streams of an AsyncBroker's
queues read through the same plans (core/event_entries.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from smqsup import defaults
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.aio.tracking import run, taking_turns
from smqsup.store.core import event_entries, plans
from smqsup.store.core.event_entries import Event

T = TypeVar("T")

class AsyncEvents:
    """store.events.Events, awaited: the same plans (core/event_entries.py),
    each round trip sent through ``send``. ``cluster``: the client is a
    RedisCluster (one XREAD per stream). Non-blocking reads take one of
    ``turns``; a blocking one does not (it would hold a turn for its wait)."""

    def __init__(self, client: Any, send: Callable[[scripts.Batch], Awaitable[list[Any]]],
                 keys: Callable[[str], QueueKeys], cluster: bool, turns: asyncio.Semaphore) -> None:
        self._client = client
        self._send = send
        self._keys = keys
        self._cluster = cluster
        self._turns = turns

    async def read(self, names: Sequence[str], after: dict[str, str], count: int = defaults.EVENTS_READ_COUNT,
                   block_ms: int = 0) -> list[Event]:
        """Events.read(), awaited (event_entries.read())."""
        return await self._run(names, event_entries.read(self._keys, names, after, count, block_ms, self._cluster))

    async def last(self, names: Sequence[str]) -> dict[str, str]:
        """Events.last(), awaited (event_entries.newest())."""
        return (await self._run(names, event_entries.newest(self._keys, names, 1)))[1]

    async def _run(self, names: Sequence[str], plan: "plans.Plan[T]") -> T:
        """Run an events plan of the streams of ``names``, each round trip in turn (but a blocking one)."""
        return await run(plan, f"read the events of {names[0]!r}", self._client, taking_turns(self._send, self._turns))
