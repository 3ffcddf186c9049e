"""store.events on redis-py's asyncio client: the event streams of an
AsyncBroker's queues read, with the same Event schema and merge."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Optional

from smqsup import defaults
from smqsup.keys import QueueKeys
from smqsup.store.ops.events import BLOCK_SLICE_MS, Event, by_key, merged
from smqsup.store.sync.connection import wrapped
from smqsup.store.sync.session import text


class AsyncEvents:
    """store.events.Events, awaited. ``cluster``: the client is a
    RedisCluster (one XREAD per stream). Non-blocking reads take one of
    ``turns``; a blocking one does not (it would hold a turn for its wait)."""

    def __init__(self, client: Any, keys: Callable[[str], QueueKeys], cluster: bool,
                 turns: asyncio.Semaphore) -> None:
        self._client = client
        self._keys = keys
        self._cluster = cluster
        self._turns = turns

    async def read(self, names: Sequence[str], after: dict[str, str], count: int = defaults.EVENTS_READ_COUNT,
                   block_ms: int = 0) -> list[Event]:
        """Events.read(), awaited."""
        block = min(max(0, block_ms), BLOCK_SLICE_MS)
        streams = {self._keys(n).events: after.get(n, "0-0") for n in names}
        with wrapped(f"read the events of {names[0]!r}"):
            async with self._turns:
                found = await self._xread(streams, count, None)
            if not found and block:
                found = await self._xread(streams, count, block)
        return merged(names, self._keys, found, after)

    async def last(self, names: Sequence[str]) -> dict[str, str]:
        """Events.last(), awaited."""
        cursors: dict[str, str] = {}
        with wrapped(f"read the events of {names[0]!r}"):
            async with self._turns:
                for name in names:
                    newest = await self._client.xrevrange(self._keys(name).events, count=1)
                    cursors[name] = text(newest[0][0]) if newest else "0-0"
        return cursors

    async def _xread(self, streams: dict[str, str], count: int, block: Optional[int]) -> dict[str, Any]:
        if not self._cluster or len(streams) == 1:
            return by_key(await self._client.xread(streams, count=count, block=block))
        found: dict[str, Any] = {}
        each = None if block is None else max(1, block // len(streams))
        for key, cursor in streams.items():
            found.update(by_key(await self._client.xread({key: cursor}, count=count, block=each)))
            if found and block is not None:
                break
        return found
