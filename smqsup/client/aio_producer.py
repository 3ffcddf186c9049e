"""Publishing from asyncio: the AsyncProducer, the Producer's API as coroutines.

    from smqsup import AsyncProducer
    async with AsyncProducer("redis://127.0.0.1:6379/0") as producer:
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
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional

from smqsup import defaults, message
from smqsup.client import batching, results
from smqsup.client.aio_flows import AsyncBatch, Steps
from smqsup.client.checks import valid_url
from smqsup.client.event_cursor import Reading
from smqsup.client.producer import Producer
from smqsup.client.publishing import Outgoing, Publishing, Sending, log
from smqsup.errors import BrokerError
from smqsup.store.aio.broker import AsyncBroker
from smqsup.store.core.records import Record
from smqsup.store.ops.batches import BatchStatus
from smqsup.store.ops.events import BLOCK_SLICE_MS, Event
from smqsup.store.ops.queues import NOTHING_DECLARED, Declared


class AsyncProducer:
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
    """

    def __init__(self, url: str, namespace: str = defaults.NAMESPACE, *,
                 max_message_size: int = defaults.MAX_MESSAGE_SIZE_BYTES, stats: bool = True,
                 dedup_ttl: Any = defaults.DEDUP_TTL_S, dedup_ttls: Optional[Mapping[str, float]] = None,
                 wait_replicas: int = 0, wait_timeout: Any = defaults.WAIT_TIMEOUT_S,
                 hooks: Sequence[object] = (), tracing: bool = False) -> None:
        """The Producer's arguments (``wait_replicas``: each publish returns
        once that many replicas have its messages, else raises
        PublishNotReplicated after ``wait_timeout`` seconds; ``hooks``: the
        Producer's, their before_publish run on the event loop, or with
        depends_on, chain and batches on the thread that publishes those; ``tracing``:
        the Producer's, the span current in the calling task the parent)."""
        core = self._core = Publishing(namespace, max_message_size=max_message_size, stats=stats,
                                       dedup_ttl=dedup_ttl, dedup_ttls=dedup_ttls, wait_replicas=wait_replicas,
                                       wait_timeout=wait_timeout, hooks=hooks, tracing=tracing)
        self.namespace = core.namespace
        self.dedup_ttl_s = core.dedup_ttl_s
        self.max_message_size = core.max_message_size
        self.id = core.id
        self._broker = AsyncBroker(valid_url(url), namespace, client_name=f"smqsup-producer-{os.getpid()}",
                                   stats=stats, wait_replicas=core.wait_replicas, wait_timeout_s=core.wait_timeout_s)
        self._steps = Steps(lambda: Producer(url, namespace, max_message_size=max_message_size, stats=stats,
                                             dedup_ttl=dedup_ttl, dedup_ttls=dedup_ttls, wait_replicas=wait_replicas,
                                             wait_timeout=wait_timeout, hooks=hooks, tracing=tracing),
                            core.sent_spans)

    @property
    def published(self) -> int:
        """Messages this producer has published (the statistics read it)."""
        return self._core.published

    @classmethod
    def from_config(cls, path: "str | os.PathLike[str]", *, hooks: Sequence[object] = (),
                    tracing: Optional[bool] = None) -> "AsyncProducer":
        """A producer using exactly the Redis and namespace that queues.yaml at
        ``path`` names (its embedded server must be running). Reads the file
        at once: call it at start-up, not in a busy loop."""
        from smqsup.config import model as config_mod
        from smqsup.launch.embedded import redis_url

        cfg = config_mod.load(path)
        return cls(redis_url(cfg), cfg.namespace, max_message_size=cfg.max_message_size_bytes, stats=cfg.stats,
                   dedup_ttls={name: q.dedup_ttl_s for name, q in cfg.queues.items()},
                   wait_replicas=cfg.redis.wait_replicas, wait_timeout=cfg.redis.wait_timeout_s, hooks=hooks,
                   tracing=any(q.tracing for q in cfg.queues.values()) if tracing is None else tracing)

    async def publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]] = None, *,
                      delay: Any = None, at: Any = None, priority: int = 0, dedup_key: Optional[str] = None,
                      dedup_ttl: Any = None, ttl: Any = None, message_id: Optional[str] = None,
                      partition_key: Optional[str] = None, result_ttl: Any = None,
                      dedup_until: Optional[str] = None, depends_on: Optional[Sequence[tuple[str, str]]] = None,
                      on_parent_failure: str = "fail", group: Optional[str] = None) -> str:
        """Producer.publish(): queue one message in one round trip; its id.
        MessageError (raised before anything is sent) for a bad argument.
        ``result_ttl`` (s; None: the queue's declared one; 0: not tracked):
        keep its state, progress and outcome (result(), state(), progress()).
        With ``depends_on``: the Producer's, on a thread (aio_flows.py)."""
        if depends_on is not None:
            return await self._steps.publish(
                queue, body, headers, delay=delay, at=at, priority=priority, dedup_key=dedup_key, dedup_ttl=dedup_ttl,
                ttl=ttl, message_id=message_id, partition_key=partition_key, result_ttl=result_ttl,
                dedup_until=dedup_until, depends_on=depends_on, on_parent_failure=on_parent_failure, group=group)
        with self._core.send_span(queue) as send:
            headers = send.headers(headers)  # (tracing on: its traceparent)
            async with self._broker.turns:
                declared = await self._declared(queue)
                out = self._core.one(queue, body, headers, delay=delay, at=at, priority=priority,
                                     dedup_key=dedup_key, dedup_ttl=dedup_ttl, ttl=ttl, message_id=message_id,
                                     partition_key=partition_key, result_ttl=result_ttl, declared=declared,
                                     dedup_until=dedup_until, group=group)
                ids = await self._deliver(out)
            send.done(ids)
        return ids[0]

    async def publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]] = None, *,
                           delay: Any = None, at: Any = None, priority: int = 0,
                           dedup_key: "str | Sequence[Optional[str]] | None" = None, dedup_ttl: Any = None,
                           ttl: Any = None, partition_key: Optional[str] = None,
                           result_ttl: Any = None, dedup_until: Optional[str] = None,
                           group: Optional[str] = None) -> list[str]:
        """Producer.publish_many(): queue many messages in one round trip
        (one per partition for a sequence of dedup keys on a partitioned
        queue); their ids in order."""
        with self._core.send_span(queue) as send:
            headers = send.headers(headers)  # (tracing on: its traceparent, in every message's headers)
            async with self._broker.turns:
                declared = await self._declared(queue)
                out = self._core.many(queue, bodies, headers, delay=delay, at=at, priority=priority,
                                      dedup_key=dedup_key, dedup_ttl=dedup_ttl, ttl=ttl, partition_key=partition_key,
                                      result_ttl=result_ttl, declared=declared, dedup_until=dedup_until, group=group)
                ids = await self._deliver(out)
            send.done(ids, many=True)
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

    async def _declared(self, queue: str) -> Declared:
        """Producer._declared(): what ``queue``'s consumers declared, read
        with its partition count (nothing if unreadable: the publish says why)."""
        self._core.check_queue(queue)
        try:
            return await self._broker.declared(queue)
        except BrokerError:
            return NOTHING_DECLARED

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
            names = await self._broker.partition_names(queue)
            fresh = reading.fresh(names)
            if fresh:
                reading.start(fresh, await ev.last(fresh) if reading.needs_last() else None)
            got = await ev.read(names, reading.after, block_ms=block)
            for event in got:
                yield event
            if not got and not follow:
                return

    async def result(self, queue: str, message_id: str, timeout: Optional[float] = None) -> Any:
        """Producer.result(), awaited: what the handler of tracked message
        ``message_id`` returned, waiting (without polling) up to ``timeout``
        seconds (None: for ever) for it to end. MessageFailed if it ended in
        the dead letters, TimeoutError if not in time, ResultUnknown if it
        was never tracked or its result_ttl passed. Waits awaited together
        share one subscription connection."""
        wait_s = results.wait_s(timeout)
        found = await self._find(queue, message_id)
        where = results.to_wait(found, wait_s)
        record = await self._broker.tracking.wait(where, message_id, wait_s) if where is not None \
            else None if found is None else found[1]
        return results.result_of(record, queue, message_id, timeout)

    async def state(self, queue: str, message_id: str) -> str:
        """Producer.state(): scheduled, waiting, active, retrying, done, dead,
        cancelled, or unknown (never tracked, or past its result_ttl)."""
        return results.state_of(await self._record(queue, message_id))

    async def progress(self, queue: str, message_id: str) -> Any:
        """Producer.progress(): the last value its handler gave
        message.progress() (None: none yet); ResultUnknown as result() says."""
        return results.progress_of(await self._record(queue, message_id), queue, message_id)

    async def cancel(self, queue: str, message_id: str) -> str:
        """Producer.cancel(): "cancelled", "stopping", the state a tracked
        message had already ended in, or "unknown"."""
        self._core.check_queue(queue)
        message.check_message_id(message_id)
        names = await self._broker.partition_names(queue)
        return await self._broker.tracking.cancel(names, message_id)

    async def _record(self, queue: str, message_id: str) -> Optional[Record]:
        found = await self._find(queue, message_id)
        return None if found is None else found[1]

    async def _find(self, queue: str, message_id: str) -> Optional[tuple[str, Record]]:
        """(partition, record) of a tracked message; None when none holds one."""
        self._core.check_queue(queue)
        message.check_message_id(message_id)
        return await self._broker.tracking.find(await self._broker.partition_names(queue), message_id)

    async def _deliver(self, out: Outgoing) -> list[str]:
        """Producer._deliver(), awaited: to its partitions side by side."""
        core = self._core
        try:
            count = await self._broker.partitions(out.queue)
        except BrokerError as exc:
            count = core.uncounted(out.queue, out.ids, exc)
        groups = core.route(out, count)
        if len(groups) == 1:  # one round trip for them all: its error is the caller's (the usual case)
            return await self._send(core.sending(out, *groups[0]))
        # One round trip per partition, side by side; the others' messages
        # are sent whatever one of them meets.
        sendings = [core.sending(out, target, where) for target, where in groups]
        replies = await asyncio.gather(*(self._send(s) for s in sendings), return_exceptions=True)
        results: list[list[str] | BrokerError] = []
        for reply in replies:
            if isinstance(reply, BaseException) and not isinstance(reply, BrokerError):
                raise reply
            results.append(reply)
        return core.merged(out, groups, results)

    async def _send(self, s: Sending) -> list[str]:
        """Producer._send(), awaited."""
        pairs: list[tuple[str, bool]] = []
        try:
            if s.options is None:
                await self._broker.push(s.target, s.frames, register=s.register,  # type: ignore[arg-type]
                                        producer=s.stats)
            else:
                pairs = await self._broker.push_with(s.target, s.frames, s.options,  # type: ignore[arg-type]
                                                     register=s.register, producer=s.stats)
        except BrokerError as exc:
            self._core.failed(s, exc)
            raise
        return self._core.sent(s, pairs)

    async def close(self) -> None:
        """Producer.close(): flush the statistics (best effort, never
        raised) and close the connections (the waits' subscription too)."""
        info = self._core.closing_stats()
        if info is not None:
            try:
                async with self._broker.turns:
                    await self._broker.producer_stats(self.id, info)
            except BrokerError as exc:
                self._core.not_flushed(exc)
        await self._steps.close()
        await self._broker.close()

    async def __aenter__(self) -> "AsyncProducer":
        return self

    async def __aexit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        """Close; an exception already in flight is the one the caller sees,
        never one from closing."""
        try:
            await self.close()
        except Exception:
            if exc is None:
                raise
            log.debug("producer %s: closing after %s failed too", self.id, exc_type, exc_info=True)
