"""What every producer shares, the Producer and the AsyncProducer alike: the
checks of a publish's arguments, its envelopes and frames, the partition each
message goes to, the error a failed send raises and the statistics a send
carries. Nothing here does I/O: each producer sends what this prepares
through its own store (store/ops/messages.py, or store/aio/broker.py for asyncio).

    publish(...) ─▶ Publishing.one / many ─▶ Outgoing (checked, encoded)
        ─▶ [the producer reads the partition count] ─▶ route ─▶ (partition, messages)...
        ─▶ sending ─▶ Sending ─▶ [the producer sends it] ─▶ sent / failed ─▶ merged
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, Optional, cast

from smqsup import defaults, framing, message
from smqsup.client import options, spans
from smqsup.client.checks import dedup_keys, materialise, one_error, valid_max_size, valid_name
from smqsup.client.outgoing import Frames, Outgoing, Sending
from smqsup.client.publish_hooks import PublishHooks
from smqsup.client.publish_options import PublishOptions
from smqsup.config import scalars
from smqsup.errors import (
    BrokerConnectionError,
    BrokerError,
    BrokerNotSent,
    MessageError,
    NotReplicated,
    PublishNotReplicated,
    PublishNotSent,
    PublishRefused,
    PublishUncertain,
    PushRefused,
)
from smqsup.ids import new_id, new_ids
from smqsup.keys import partition_name
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.core.declared import NOTHING_DECLARED, Declared

#: The logger of every producer, sync or asyncio: one name, the Producer's
#: module's (operators grep their logs by it).
LOGGER = "smqsup.client.producer"
log = logging.getLogger(LOGGER)

#: Queues whose single-publish envelope writers a producer keeps at once (then forgets them all).
WRITERS_KEPT = 1024

def _partition_key(partition_key: Any, group: Any) -> Optional[str]:
    """The checked partition key; MessageError with a group too (a group
    lives in the partition its name picks)."""
    if partition_key is None:
        return None
    if group is not None:
        raise MessageError("partition_key and group: give one (a group lives in the partition its name picks)")
    return options.dedup_key(partition_key, "partition_key")


class Publishing:
    """The state and the pure steps every producer shares (see the module's
    docstring): its settings, checked; the queues it has registered; the
    partition each queue without a key went to last; its envelope writers;
    what it has published and the statistics it sends about that."""

    def __init__(self, namespace: str, *, max_message_size: int, stats: bool, dedup_ttl: Any,
                 dedup_ttls: Optional[Mapping[str, float]], wait_replicas: int, wait_timeout: Any,
                 hooks: Sequence[object] = (), tracing: bool = False) -> None:
        """Check every setting (the first bad one raises, MessageError or
        ConfigError, in the order of the Producer's arguments)."""
        self.namespace = valid_name(namespace, "namespace")
        self.dedup_ttl_s = options.seconds(dedup_ttl, "dedup_ttl", zero_ok=False)
        self.dedup_ttls = dict(dedup_ttls or {})
        self.max_message_size = valid_max_size(max_message_size)
        self.wait_replicas = scalars.int_range(0, defaults.WAIT_REPLICAS_MAX)(wait_replicas, "wait_replicas", "")
        self.wait_timeout_s = scalars.wait_timeout(wait_timeout, "wait_timeout", "")
        self.stats = stats
        checked = PublishHooks(hooks)
        #: The before_publish hooks; None without any (a publish then pays one test).
        self.hooks: Optional[PublishHooks] = checked if checked else None
        #: smqsup.tracing where tracing is on (imported then only), else None.
        self.tracing: Any = spans.tracing_module(tracing)
        #: (tracing on) the send spans of the messages published last, for their children's links.
        self.sent_spans: Any = None if self.tracing is None else self.tracing.Sent()
        self.registered: set[str] = set()
        #: queue -> the last partition a message without a key went to.
        self.turns: dict[str, int] = {}
        self.writers: dict[str, message.EnvelopeWriter] = {}
        #: Messages this producer has published (the statistics read it).
        self.published = 0
        self.id = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self._next_flush = 0.0
        self._flushed: tuple[float, int] = (time.monotonic(), 0)
        self._rate = 0.0

    # --- before sending: checks and envelopes ---------------------------------

    def one(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]], given: PublishOptions,
            declared: Declared = NOTHING_DECLARED, hooked: bool = True) -> Outgoing:
        """publish()'s message, checked and encoded (MessageError before
        anything is sent); tracked for ``given.result_ttl``, or, when that
        is None, for the queue's declared result_ttl (0: not tracked); with
        events when the queue declared them; a member of batch
        ``given.link`` ("HOME\tBID") if given; of message group
        ``given.group`` if given. ``hooked`` False: the before_publish hooks
        do not run (a check only, of a message publish() then sends)."""
        self.check_queue(queue)
        by = _partition_key(given.partition_key, given.group)
        if self.hooks is not None and hooked:
            headers = self.hooks.headers(queue, body, headers)
        kept = declared.result_ttl_s if given.result_ttl is None else options.result_ttl(given.result_ttl)
        if not kept and not declared.events_max and given.plain():
            if headers is None and given.message_id is None:  # the envelope's fixed parts encoded once per queue
                mid = new_id()
                payload = self._writer(queue).payload(mid, body, created_at=time.time())
            else:
                mid, payload = message.encode_payload(queue, body, headers=headers, message_id=given.message_id,
                                                      max_size_bytes=self.max_message_size)
            return Outgoing(queue, [mid], [framing.frame(payload)], None, by, [])
        keys = [None if given.dedup_key is None else options.dedup_key(given.dedup_key)]
        mid = message.check_message_id(given.message_id) if given.message_id is not None else new_id()
        opts = self._options(queue, given, kept, declared.events_max)
        return self._with_options(queue, [body], [mid], headers, keys, opts, by)

    def many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]], given: PublishOptions,
             declared: Declared = NOTHING_DECLARED) -> Outgoing:
        """publish_many()'s messages, checked and encoded (every body before
        anything is sent); tracked, members of a batch, and of a group, as
        one() says."""
        self.check_queue(queue)
        by = _partition_key(given.partition_key, given.group)
        items = materialise(queue, bodies)
        kept = declared.result_ttl_s if given.result_ttl is None else options.result_ttl(given.result_ttl)
        hooked = None if self.hooks is None else self.hooks.writers(queue, items, headers, self.max_message_size)
        if not kept and not declared.events_max and given.plain():
            ids = new_ids(len(items))
            if hooked is not None:  # (a writer per set of headers the hooks made)
                frames = [b"0|" + payload(mid, body) for payload, mid, body in zip(hooked, ids, items)]
            else:  # (one writer for all: the plain path, unchanged)
                payload = message.EnvelopeWriter(queue, headers, self.max_message_size).payload
                frames = [b"0|" + payload(mid, body) for mid, body in zip(ids, items)]
            return Outgoing(queue, ids, frames, None, by, [])
        keys = dedup_keys(given.dedup_key, len(items))
        opts = self._options(queue, given, kept, declared.events_max)
        return self._with_options(queue, items, new_ids(len(items)), headers, keys, opts, by, hooked)

    def send_span(self, queue: str) -> Any:
        """The send span of one publish call to ``queue`` (smqsup.tracing.Send,
        a context manager: ``with core.send_span(q) as send``), UNTRACED when
        tracing is off."""
        return spans.UNTRACED if self.tracing is None else self.tracing.Send(queue, self.sent_spans)

    def check_queue(self, queue: str) -> None:
        if not isinstance(queue, str) or queue not in self.registered:
            valid_name(queue, "queue")

    def _options(self, queue: str, given: PublishOptions, kept: int, events_max: int) -> scripts.Options:
        """``given`` in the script's units, checked in the order the
        Producer's docstring names them (the first bad one raises)."""
        until = options.dedup_until(given.dedup_until, given.dedup_key, given.dedup_ttl)
        group_ = b"" if given.group is None else options.group(given.group)
        if given.dedup_ttl is not None and given.dedup_key is None:
            raise MessageError("dedup_ttl: given without dedup_key (it is how long a dedup key holds)")
        return options.build(given, default_dedup_ttl_s=self.dedup_ttls.get(queue, self.dedup_ttl_s),
                             result_ttl_s=kept, events_max=events_max, until=until, group_=group_)

    def _with_options(self, queue: str, bodies: list[Any], ids: list[str], headers: Optional[Mapping[str, Any]],
                      keys: list[Optional[str]], opts: scripts.Options, by: Optional[str],
                      hooked: Optional[list[Callable[..., bytes]]] = None) -> Outgoing:
        """Messages for publish_options.lua: (id, payload, dedup key) items
        (each body's payload by ``hooked``'s writer when given)."""
        payloads = hooked or [message.EnvelopeWriter(queue, headers, self.max_message_size).payload] * len(bodies)
        items = [(mid, payload(mid, body, key), key) for payload, mid, body, key in zip(payloads, ids, bodies, keys)]
        return Outgoing(queue, ids, items, opts, by, keys)

    def _writer(self, queue: str) -> message.EnvelopeWriter:
        """The envelope writer of single publishes to ``queue`` without
        headers, kept (for at most WRITERS_KEPT queues at once)."""
        writer = self.writers.get(queue)
        if writer is None:
            if len(self.writers) >= WRITERS_KEPT:
                self.writers.clear()
            writer = self.writers[queue] = message.EnvelopeWriter(queue, None, self.max_message_size)
        return writer

    # --- partitions -------------------------------------------------------------

    def uncounted(self, queue: str, ids: list[str], exc: BrokerError) -> int:
        """The partition count to use when reading it raised ``exc``:
        PublishNotSent if Redis could not be reached; a count Redis refuses
        to read (a key of the wrong type) is said once, and the messages go
        to the queue itself (1)."""
        if isinstance(exc, BrokerConnectionError):
            raise PublishNotSent(f"{exc} (messages {ids[0]}..{ids[-1]} are not queued)", ids) from exc
        warn_once(log, f"partitions:{queue}", "queue %s: the partition count cannot be read (%s); publishing "
                  "to the queue itself (said once)", queue, exc)
        return 1

    def route(self, out: Outgoing, count: int) -> list[tuple[str, list[int]]]:
        """(partition, positions of its messages) for ``out`` on a queue of
        ``count`` partitions: all to the partition key's, else to their
        group's (a group lives in one partition: its name is the key), else
        (options) to each dedup key's, else spread: as many in turn to
        each partition, from the next in turn, in their order (one partition
        gets a run of consecutive messages)."""
        everything = list(range(len(out.ids)))
        if out.options is not None and out.options.group:
            return [(self._partition(out.queue, out.options.group.decode("utf-8"), count), everything)]
        keys = out.keys
        if out.by is not None or (keys and keys[0] is not None and len(set(keys)) == 1):
            return [(self._partition(out.queue, out.by if out.by is not None else keys[0], count), everything)]
        if out.options is None or all(key is None for key in keys):
            return self._spread(out.queue, len(everything), count)
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(self._partition(out.queue, key, count), []).append(i)
        return list(groups.items())

    def _spread(self, queue: str, n: int, count: int) -> list[tuple[str, list[int]]]:
        """``n`` messages over the ``count`` partitions of ``queue`` (at most
        one each for fewer messages), as evenly as they go: consecutive
        runs, from the next partition in turn."""
        if count == 1 or n <= 1:
            return [(self._partition(queue, None, count), list(range(n)))]
        parts = min(count, n)
        out, start = [], 0
        for i in range(parts):
            size = n // parts + (i < n % parts)
            out.append((self._partition(queue, None, count), list(range(start, start + size))))
            start += size
        return out

    def _partition(self, queue: str, key: Optional[str], count: int) -> str:
        """The partition of ``queue`` a message with partition (or dedup)
        ``key`` goes to: the key's (CRC-32, as a producer in any language
        can compute it), or the next in turn."""
        if count == 1:
            return queue
        if key is not None:
            return partition_name(queue, zlib.crc32(key.encode("utf-8")) % count)
        turn = self.turns[queue] = self.turns.get(queue, -1) + 1
        return partition_name(queue, turn % count)

    # --- sending and its outcome ------------------------------------------------

    def sending(self, out: Outgoing, target: str, where: list[int]) -> Sending:
        """The round trip of ``out``'s messages at ``where`` to partition
        ``target``, with the registry and, about once a second, the
        producer's statistics riding along."""
        whole = len(where) == len(out.ids)
        frames = out.frames if whole else [out.frames[i] for i in where]
        ids = out.ids if whole else [out.ids[i] for i in where]
        register = out.queue not in self.registered
        now = time.monotonic()
        flush = self.stats and now >= self._next_flush
        stats = (self.id, self.stats_json(now, len(frames))) if flush else None
        if flush:
            # Taken now, so that sends in flight together (asyncio) carry one
            # flush between them; given back if this one fails (failed()).
            self._next_flush = now + 1.0
        return Sending(out.queue, target, cast(Frames, frames), ids, out.options, register, stats, now, where)

    def sendings(self, out: Outgoing, count: "int | BrokerError") -> list[Sending]:
        """The round trips of ``out`` to a queue of ``count`` partitions (or
        the error reading that count: uncounted() says what then), one per
        partition its messages go to (route())."""
        if isinstance(count, BrokerError):
            count = self.uncounted(out.queue, out.ids, count)
        return [self.sending(out, target, where) for target, where in self.route(out, count)]

    def sending_of(self, s: Sending) -> "SendingOf":
        """``with core.sending_of(s):`` around the store's publish of round
        trip ``s``: its error raised as the publish error failed() makes of it."""
        return SendingOf(self, s)

    def sent(self, s: Sending, pairs: list[tuple[str, bool]]) -> list[str]:
        """Count a round trip that went through; the ids it returns (for
        items: what the store's push_with returned, ``pairs``)."""
        self.registered.add(s.queue)
        self.published += len(s.frames) if s.options is None else sum(queued for _, queued in pairs)
        return list(s.ids) if s.options is None else [mid for mid, _ in pairs]

    def failed(self, s: Sending, exc: BrokerError) -> None:
        """Raise the publish error for the store's error ``exc`` of round
        trip ``s`` (counting what it queued); return for any other error,
        which the caller raises as it is."""
        ids = s.ids
        if s.stats is not None:
            self._next_flush = min(self._next_flush, s.now)  # the flush did not go: the next send tries
        if isinstance(exc, BrokerNotSent):
            raise PublishNotSent(f"{exc} (messages {ids[0]}..{ids[-1]} are not queued)", ids) from exc
        if isinstance(exc, NotReplicated):
            pairs = cast("list[tuple[str, bool]]", exc.result) if s.options is not None else []
            self.published += len(s.frames) if s.options is None else sum(queued for _, queued in pairs)
            self.registered.add(s.queue)
            raise PublishNotReplicated(f"{exc} (messages {ids[0]}..{ids[-1]} are queued on the master, but a "
                                       f"failover now could lose them)", ids, exc.replicas) from exc
        if isinstance(exc, PushRefused):
            queued = [mid for mid, ok in zip(ids, exc.queued) if ok]
            self.published += len(queued)
            raise PublishRefused(str(exc), queued, [mid for mid, ok in zip(ids, exc.queued) if not ok]) from exc
        if isinstance(exc, BrokerConnectionError):
            raise PublishUncertain(f"{exc} (messages {ids[0]}..{ids[-1]} may or may not be queued)", ids) from exc

    @staticmethod
    def merged(out: Outgoing, sendings: Sequence[Sending], results: "Sequence[list[str] | BaseException]") -> list[str]:
        """The ids of ``out`` once each of its ``sendings`` was sent (its
        result: the ids returned, or the store error it raised; any other
        exception is raised as it is); one_error()'s error if any failed
        (the others' messages are queued)."""
        if len(results) == 1 and isinstance(results[0], list):
            return results[0]  # one round trip for all of them (sent()'s ids, in their order): the usual case
        ids = list(out.ids)
        failed: list[tuple[BrokerError, list[str]]] = []
        for s, result in zip(sendings, results):
            if isinstance(result, BaseException):
                if not isinstance(result, BrokerError):
                    raise result
                failed.append((result, s.ids))
                continue
            for i, mid in zip(s.where, result):
                ids[i] = mid
        if failed:
            raise one_error(failed)
        return ids

    # --- statistics ---------------------------------------------------------------

    def stats_json(self, now: float, sending: int) -> str:
        then, count = self._flushed
        published = self.published + sending
        if now > then:
            instant = (published - count) / (now - then)
            self._rate += (instant - self._rate) * min(1.0, (now - then) / 10.0)
        self._flushed = (now, published)
        return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "namespace": self.namespace,
                           "published": published, "rate": round(self._rate, 2)}, separators=(",", ":"))

    def closing_stats(self) -> Optional[str]:
        """The statistics to flush at close, or None (none kept, nothing published)."""
        return self.stats_json(time.monotonic(), 0) if self.stats and self.published else None

    @contextmanager
    def flushing(self) -> Iterator[None]:
        """Around the statistics flush at close: a store error is said
        (not_flushed()), never raised."""
        try:
            yield
        except BrokerError as exc:
            self.not_flushed(exc)

    @contextmanager
    def closing_after(self, exc: Optional[BaseException]) -> Iterator[None]:
        """Around a producer's close at the end of a ``with`` block: an
        exception already in flight (``exc``, PublishRefused...) is the one
        the caller sees, never one from closing (logged at debug level)."""
        try:
            yield
        except Exception:
            if exc is None:
                raise
            log.debug("producer %s: closing after %r failed too", self.id, exc, exc_info=True)

    def not_flushed(self, exc: BrokerError) -> None:
        """Say that the statistics flush at close failed: never raised (the
        messages are queued whatever happens to their statistics); a
        refusal is a warning once per process, a lost connection debug."""
        if isinstance(exc, BrokerConnectionError):
            log.debug("producer %s: statistics not flushed at close: %s", self.id, exc)
        else:
            warn_once(log, "refused:producer statistics", "producer %s: Redis refused the producer statistics "
                      "(said once; later refusals at debug level): %s", self.id, exc)


class SendingOf:
    """Publishing.sending_of's context manager: a class with slots, as
    failures.wrapped is, not a generator: it is entered once per publish."""

    __slots__ = ("_core", "_s")

    def __init__(self, core: Publishing, s: Sending) -> None:
        self._core, self._s = core, s

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Any) -> Literal[False]:
        if isinstance(exc, BrokerError):
            self._core.failed(self._s, exc)  # raises the publish error for a store's error
        return False
