"""The AsyncProducer's publishes of more than one step (``depends_on``,
``chain``, batches): the Producer's own (client/flows.py), each run on a
worker thread through a Producer of the same settings, which the
AsyncProducer makes at its first such publish. They cost a thread hop on
top of the Producer's round trips; plain publishes never come here.

    async with producer.batch(on_complete=("albums", {"album": 7})) as batch:
        await batch.publish_many("resize", images)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional

from smqsup.client.batching import Batch
from smqsup.client.producer import Producer
from smqsup.client.publish_options import PublishOptions
from smqsup.errors import MessageError
from smqsup.store.ops.batches import BatchStatus


class Steps:
    """The Producer behind an AsyncProducer's multi-step publishes."""

    def __init__(self, make: Callable[[], Producer], sent: Any = None) -> None:
        """``sent``: the AsyncProducer's tracing.Sent (tracing on), shared with
        the Producer, whose children then link to the AsyncProducer's sends."""
        self._make = make
        self._sent = sent
        self._producer: Optional[Producer] = None
        self._lock = threading.Lock()

    def sync(self) -> Producer:
        """The Producer (made at the first call, on whichever thread)."""
        with self._lock:
            if self._producer is None:
                self._producer = self._make()
                if self._sent is not None:
                    self._producer._core.sent_spans = self._sent
            return self._producer

    async def publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]],
                      given: PublishOptions) -> str:
        return await asyncio.to_thread(lambda: self.sync()._publish(queue, body, headers, given))

    async def chain(self, steps: Sequence[Any]) -> list[str]:
        return await asyncio.to_thread(lambda: self.sync().chain(steps))

    async def batch_status(self, batch_id: str) -> Optional[BatchStatus]:
        return await asyncio.to_thread(lambda: self.sync().batch_status(batch_id))

    async def close(self) -> None:
        """Close the Producer, if one was made."""
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            await asyncio.to_thread(producer.close)


class AsyncBatch:
    """Producer.batch() for asyncio code: ``async with`` opens it (or
    ``await batch.open()``) and closes it at the block's end unless the block
    raised (or ``await batch.close()``); ``id`` once opened."""

    def __init__(self, steps: Steps, on_complete: Optional[tuple[str, Any]],
                 on_success: Optional[tuple[str, Any]]) -> None:
        self._steps = steps
        self._callbacks = (on_complete, on_success)
        self._batch: Optional[Batch] = None

    @property
    def id(self) -> str:
        return self._opened().id

    def _opened(self) -> Batch:
        if self._batch is None:
            raise MessageError("batch: not opened yet (async with producer.batch(...), or await batch.open())")
        return self._batch

    async def open(self) -> "AsyncBatch":
        """Open it in Redis (once)."""
        if self._batch is None:
            self._batch = await asyncio.to_thread(lambda: self._steps.sync().batch(*self._callbacks))
        return self

    async def publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]] = None, **options: Any) -> str:
        """Batch.publish."""
        return await asyncio.to_thread(self._opened().publish, queue, body, headers, **options)

    async def publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]] = None,
                           **options: Any) -> list[str]:
        """Batch.publish_many."""
        return await asyncio.to_thread(self._opened().publish_many, queue, list(bodies), headers, **options)

    async def close(self) -> bool:
        """Batch.close: whether its callbacks were published now."""
        return await asyncio.to_thread(self._opened().close)

    async def __aenter__(self) -> "AsyncBatch":
        return await self.open()

    async def __aexit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        """Close, unless the block raised (Batch.__exit__ says why)."""
        if exc is None:
            await self.close()
