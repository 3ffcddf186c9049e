"""Publishing from asyncio: the AsyncProducer, the Producer's API as coroutines.

    from smqsup import AsyncProducer
    async with AsyncProducer.from_config("queues.yaml") as producer:   # or AsyncProducer(os.environ["REDIS_URL"])
        message_id = await producer.publish("orders", {"order": 42})
        await producer.publish_many("orders", [{"order": 43}, {"order": 44}], priority=9)
        mid = await producer.publish("resize", {"image": 7}, result_ttl=3600)
        await producer.result("resize", mid, timeout=30)   # what the handler returned

Its checks, envelopes, partition choice, errors and statistics are the
Producer's own (publishing.py), so both write the same frames and raise the
same errors; only the sending differs: store/aio/broker.py, on redis.asyncio.
The same goes for tracked messages: results.py makes the answer of the
record store/aio/tracking.py reads, and its waits share one subscription.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional, TypeVar

from smqsup.client import batching
from smqsup.client.aio_flows import AsyncBatch, Steps
from smqsup.client.event_cursor import Reading
from smqsup.client.outgoing import Outgoing, Sending
from smqsup.client.producer import Producer
from smqsup.client.producer_base import ProducerBase
from smqsup.client.publish_options import PublishOptions
from smqsup.errors import BrokerError
from smqsup.store.aio.broker import AsyncBroker
from smqsup.store.core.declared import Declared
from smqsup.store.core.event_entries import BLOCK_SLICE_MS, Event
from smqsup.store.ops.batches import BatchStatus

T = TypeVar("T")

class AsyncProducer(ProducerBase[Awaitable[str], Awaitable[list[str]], Awaitable[Any]]):
    """Publishes JSON messages to queues from asyncio code; the Producer's
    arguments, options, checks and errors (see its docstrings), each method a
    coroutine. Made with no I/O (inside a running loop or not), it connects
    at its first publish. Use it in one event loop only, and make one per
    process (never across fork).

    Publishes awaited together take turns, at most defaults.AIO_ROUND_TRIPS
    at once, so as many connections (per master on a cluster); each encodes
    its messages in its turn, so a thousand awaited together do not hold
    the event loop for the time of a thousand encodings at once (a body of
    many MB still holds it for its own JSON time).
    Cancelling a publish leaves its messages as a lost reply would: maybe
    queued (the connection is dropped, never reused out of step).

    Its arguments are the Producer's (``hooks``: their before_publish run on
    the event loop, or with depends_on, chain and batches on the thread that
    publishes those; ``tracing``: the span current in the calling task is
    the parent). publish() and publish_many() return awaitables.
    """

    _broker: AsyncBroker

    def _open(self, url: str, namespace: str, settings: dict[str, Any]) -> None:
        core = self._core
        self._broker = AsyncBroker(url, namespace, client_name=f"smqsup-producer-{os.getpid()}", stats=core.stats,
                                   wait_replicas=core.wait_replicas, wait_timeout_s=core.wait_timeout_s)
        self._steps = Steps(lambda: Producer(url, namespace, **settings), core.sent_spans)

    async def _publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]],
                       given: PublishOptions) -> str:
        if given.depends_on is not None:  # the Producer's, on a thread (aio_flows.py)
            return await self._steps.publish(queue, body, headers, given)
        return (await self._sent(queue, headers, lambda mine, said: self._core.one(queue, body, mine, given, said)))[0]

    async def _publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]],
                            given: PublishOptions) -> list[str]:
        return await self._sent(queue, headers, lambda mine, said: self._core.many(queue, bodies, mine, given, said),
                                many=True)

    async def _sent(self, queue: str, headers: Optional[Mapping[str, Any]], outgoing: Callable[..., Outgoing],
                    many: bool = False) -> list[str]:
        """The ids of the messages ``outgoing`` makes of the headers the send
        span gives (tracing on: its traceparent) and what ``queue``
        declared, sent to its partitions: all of it in one of the turns."""
        with self._core.send_span(queue) as send:
            headers = send.headers(headers)
            async with self._broker.turns:
                count, said = await self._declared(queue)
                ids = await self._deliver(outgoing(headers, said), count)
            send.done(ids, many=many)
        return ids

    async def chain(self, steps: Sequence[Any]) -> list[str]:
        """Producer.chain(), on a thread (aio_flows.py)."""
        return await self._steps.chain(steps)

    def batch(self, on_complete: Optional[tuple[str, Any]] = None,
              on_success: Optional[tuple[str, Any]] = None) -> AsyncBatch:
        """Producer.batch() for asyncio: ``async with producer.batch(...) as
        batch:`` opens it, ``await batch.publish(...)``, closed at the end.
        Its callbacks are checked here, as the Producer's (MessageError)."""
        batching.callbacks(on_complete, on_success, self.max_message_size)
        return AsyncBatch(self._steps, on_complete, on_success)

    async def batch_status(self, batch_id: str) -> Optional[BatchStatus]:
        """Producer.batch_status(), on a thread."""
        return await self._steps.batch_status(batch_id)

    async def _declared(self, queue: str) -> "tuple[int | BrokerError, Declared]":
        """Producer._declared(), awaited."""
        self._core.check_queue(queue)
        return await self._broker.declared(queue)

    # --- after publish -----------------------------------------------------------

    def events(self, queue: str, since: Any = None, *, follow: bool = False) -> AsyncIterator[Event]:
        """Producer.events() as an async iterator: ``async for event in
        producer.events("q", follow=True)``. A bad argument raises
        MessageError here, before the iteration."""
        self._core.check_queue(queue)
        return self._events(queue, Reading(since), follow)

    async def _events(self, queue: str, reading: Reading, follow: bool) -> AsyncIterator[Event]:
        ev, block = self._broker.events, BLOCK_SLICE_MS if follow else 0
        while True:
            names = await self._broker.tracking.run(self._broker.names(queue), f"read the partitions of {queue!r}")
            fresh = reading.fresh(names)
            if fresh:
                reading.start(fresh, await ev.last(fresh) if reading.needs_last() else None)
            got = await ev.read(names, reading.after, block_ms=block)
            for event in got:
                yield event
            if not got and not follow:
                return

    async def _then(self, got: Awaitable[Any], answer: Callable[[Any], T]) -> T:
        return answer(await got)

    async def _deliver(self, out: Outgoing, count: "int | BrokerError") -> list[str]:
        """Producer._deliver(), awaited: to its partitions side by side (the
        others' messages are sent whatever one of them meets)."""
        sendings = self._core.sendings(out, count)
        if len(sendings) == 1:  # one round trip for them all: its error is the caller's (the usual case)
            return await self._send(sendings[0])
        sent = await asyncio.gather(*(self._send(s) for s in sendings), return_exceptions=True)
        return self._core.merged(out, sendings, sent)

    async def _send(self, s: Sending) -> list[str]:
        """Producer._send(), awaited."""
        with self._core.sending_of(s):
            pairs = await self._broker.publish(s.target, s.frames, s.options, register=s.register, producer=s.stats)
        return self._core.sent(s, pairs)

    async def close(self) -> None:
        """Producer.close(): flush the statistics (best effort, never
        raised) and close the connections (the waits' subscription too)."""
        info = self._core.closing_stats()
        if info is not None:
            with self._core.flushing():
                await self._broker.producer_stats(self.id, info)
        await self._steps.close()
        await self._broker.close()

    async def __aenter__(self) -> "AsyncProducer":
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        """Close; an exception already in flight is the one the caller sees,
        never one from closing."""
        with self._core.closing_after(exc):
            await self.close()
