"""Tracked messages on redis.asyncio, for the AsyncProducer: tracking.py's
read of a record and its wait for an end, as coroutines; the records read
through tracking.py's one schema (found_in, parse), never a copy of it.

A read is one round trip: TIME (routed with the first partition's keys on
a cluster), then per partition HMGET of the record, result and progress
and ZSCORE of its expiry. A wait is tracking.py's, race-free the same way:
subscribe to the message's channel, read the record only once Redis
confirmed the subscription, then wait for a published state and read
again. The waits of one AsyncBroker share one subscription connection and
one reading task (aio_waiters.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Optional

from smqsup import defaults, framing
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.aio_waiters import AsyncSubscriber, AsyncWatch
from smqsup.store.connection import wrapped
from smqsup.store.contents import PAGE
from smqsup.store.link import UNREACHABLE, ms_of
from smqsup.store.tracking import Record, found_in

#: Longest a wait blocks on its subscription at once, s (then it reads the record again).
_WAIT_SLICE_S = 5.0


async def _until(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for ``event`` at most ``timeout_s``."""
    if event.is_set() or timeout_s <= 0:
        return
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except asyncio.TimeoutError:
        pass


class AsyncTracking:
    """Reads and waits of tracked messages, for one AsyncBroker: ``send``
    its round trip, ``keys`` its keys, ``turns`` the limit its round trips
    take turns under, ``open_connection`` the maker of the waits'
    subscription connection."""

    def __init__(self, client: Any, send: Callable[[scripts.Batch], Awaitable[list[Any]]],
                 keys: Callable[[str], QueueKeys], turns: asyncio.Semaphore,
                 open_connection: Callable[[], Awaitable[Any]]) -> None:
        self._client = client
        self._send = send
        self._keys = keys
        self._turns = turns
        self._subscriber = AsyncSubscriber(open_connection)

    async def find(self, names: Sequence[str], message_id: str) -> Optional[tuple[str, Record]]:
        """tracking.Tracking.find(), awaited: the partition (among ``names``)
        holding the record of ``message_id``, and the record; None when none does."""
        batch = scripts.Batch(self._client)
        batch.command("TIME", route=self._keys(names[0]).tracked)
        for name in names:
            k = self._keys(name)
            batch.command("HMGET", k.tracked, message_id, f"{message_id}:r", f"{message_id}:p")
            batch.command("ZSCORE", k.tracked_expiry, message_id)
        with wrapped(f"read message {message_id!r} of {names[0]!r}"):
            async with self._turns:
                now, *replies = await self._send(batch)
            unreadable = [r for r in (now, *replies) if isinstance(r, UNREACHABLE)]
            if unreadable or isinstance(now, Exception):
                raise unreadable[0] if unreadable else now
        return found_in(names, replies, ms_of(now))

    async def wait(self, name: str, message_id: str, timeout_s: float) -> Optional[Record]:
        """tracking.Tracking.wait(), awaited: the record of ``message_id`` in
        partition ``name`` once it ended, or as it is when ``timeout_s``
        passed first; None once it is gone."""
        deadline = time.monotonic() + timeout_s
        channel = self._keys(name).tracked_channel(message_id)
        while True:
            with wrapped(f"wait for message {message_id!r} of {name!r}"):
                w = await self._subscriber.watch(channel)
            try:
                await _until(w.subscribed, deadline - time.monotonic())
                record = await self._waited(w, name, message_id, deadline)
            finally:
                self._subscriber.unwatch(w)
            if w.refused is not None:
                with wrapped(f"wait for message {message_id!r} of {name!r} (SUBSCRIBE {channel})"):
                    raise w.refused
            if not w.lost or record is None or record.ended or time.monotonic() >= deadline:
                return record

    async def _waited(self, w: AsyncWatch, name: str, message_id: str, deadline: float) -> Optional[Record]:
        """wait() once subscribed: read, then wait until a new state is
        published (at most _WAIT_SLICE_S at once) and read again; returns
        early when the subscription was lost."""
        while True:
            found = await self.find([name], message_id)
            if found is None or found[1].ended:
                return None if found is None else found[1]
            left = deadline - time.monotonic()
            if left <= 0 or w.lost:
                return found[1]
            await _until(w.changed, min(left, _WAIT_SLICE_S))
            w.changed.clear()

    async def cancel(self, names: Sequence[str], message_id: str) -> str:
        """contents.Contents.cancel(), awaited: cancel ``message_id`` in the
        first partition of ``names`` that knows it (cancel.lua's answers)."""
        for name in names:
            answer = "moved"
            for look in range(defaults.CANCEL_LOOKS):  # (it moved between the look and the script: look again)
                with wrapped(f"cancel message {message_id!r} of {name!r}"):
                    seen, frame, holder = (await self._locate(name, message_id) if look < defaults.CANCEL_LOOKS - 1
                                           else ("", b"", ""))
                    batch = scripts.Batch(self._client)
                    batch.add(scripts.cancel(self._keys(name), message_id, seen, frame, holder))
                    async with self._turns:
                        [answer] = await self._send(batch)
                    if isinstance(answer, Exception):
                        raise answer
                if answer != "moved":
                    break
            if answer != "unknown":
                return str(answer)
        return "unknown"

    async def _locate(self, name: str, message_id: str) -> tuple[str, bytes, str]:
        """(where, frame, holder) of ``message_id`` in partition ``name``: a
        waiting place, "processing" and the registered consumer whose list
        holds it, or ("", b"", "");
        read PAGE entries a round trip, as Contents.waiting reads them."""
        k = self._keys(name)
        places = [("priority", "ZRANGE", k.priority), ("scheduled", "ZRANGE", k.scheduled),
                  ("delayed", "ZRANGE", k.delayed), ("pending", "LRANGE", k.pending)]
        for where, command, key in places:
            start = 0
            while page := await self._one(command, key, start, start + PAGE - 1):
                found = next((f for f in page if framing.peek_id(f) == message_id), None)
                if found is not None:
                    return where, found, ""
                start += PAGE
        for cid in await self._one("HKEYS", k.consumers):
            holder = cid.decode("utf-8", "backslashreplace")
            for frame in await self._one("LRANGE", k.processing(holder), 0, -1):
                if framing.peek_id(frame) == message_id:
                    return "processing", frame, holder
        return "", b"", ""

    async def _one(self, *command: Any) -> Any:
        batch = scripts.Batch(self._client)
        batch.command(*command)
        async with self._turns:
            [reply] = await self._send(batch)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def close(self) -> None:
        """Close the waits' shared subscription and its tasks."""
        await self._subscriber.close()
