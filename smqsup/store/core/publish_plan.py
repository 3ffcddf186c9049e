"""A publish, decided once for both drivers (ops/messages.py, aio/broker.py),
no I/O: pushed() is its plan (plans.py's protocol: it yields the commands of
its round trip and is sent their replies): the script calls its frames
become (plain or with options, chunks of PUBLISH_CHUNK), what rides along
(the producer's registration, its statistics, WAIT for replicas), and what
the replies mean (ids, duplicates, a refusal, too few replicas).

    pushed() ──yield [SADD, publish.lua..., WAIT, statistics]──▶ driver: one round trip
             ◀──────────────── replies ─────────────────────┘ ─▶ the (id, queued) pairs
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, cast

import redis.exceptions as rexc

from smqsup.errors import NotReplicated, PushRefused
from smqsup.keys import QueueKeys, logical_name, queues_set
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.core.plans import Command, Plan, Request
from smqsup.store.core.replies import LOGGER, UNREACHABLE, confirmed

log = logging.getLogger(LOGGER)


#: Most frames one publish script call pushes (publish_many sends several
#: calls in one pipelined round trip).
PUBLISH_CHUNK = 1000


#: Producers silent this long drop out of the statistics, in ms.
PRODUCER_TTL_MS = 600_000


class Publisher(Protocol):
    """What a publish batch is made from: a Session, or the asyncio store's (aio/broker.py)."""

    namespace: str
    stats: bool
    wait_replicas: int
    wait_timeout_ms: int

    @property
    def keys(self) -> Callable[[str], QueueKeys]: ...


@dataclass
class PublishBatch:
    """The round trip of a publish (publish_requests()) and where its parts are."""

    requests: list[Request]
    #: Index of the first publish call, and how many there are.
    first: int
    count: int
    #: Index of the WAIT (with wait_replicas), else -1.
    waited: int = -1
    #: What each call that does not queue messages is, for the log.
    bookkeeping: dict[int, str] = field(default_factory=dict)


def plain_calls(keys: QueueKeys, frames: Sequence[bytes], stats: bool) -> tuple[list[scripts.Call[Any]], list[int]]:
    """publish.lua calls of at most PUBLISH_CHUNK ``frames`` each, and their sizes."""
    chunks = [frames[start:start + PUBLISH_CHUNK] for start in range(0, len(frames), PUBLISH_CHUNK)]
    return [scripts.publish(keys, chunk, stats) for chunk in chunks], [len(chunk) for chunk in chunks]


def option_calls(keys: QueueKeys, items: Sequence[tuple[str, bytes, Optional[str]]], options: scripts.Options,
                 stats: bool) -> tuple[list[scripts.Call[Any]], list[int]]:
    """publish_options.lua calls of at most PUBLISH_CHUNK ``items`` each, and their sizes."""
    chunks = [items[start:start + PUBLISH_CHUNK] for start in range(0, len(items), PUBLISH_CHUNK)]
    return [scripts.publish_options(keys, chunk, options, stats) for chunk in chunks], [len(c) for c in chunks]


def flat_pairs(replies: Any) -> list[tuple[str, bool]]:
    """The (id, queued) pairs of option_calls' replies, in order: what one
    call gives (also as a NotReplicated's result, which is mended in place)."""
    return [pair for reply in cast(list[Any], replies) for pair in reply]


def publish_requests(on: Publisher, queue: str, calls: Sequence[scripts.Call[Any]], *, register: bool,
                     producer: Optional[tuple[str, str]]) -> PublishBatch:
    """Publish script ``calls`` in one round trip, with SADD of the queue
    name when ``register``, a WAIT after them with wait_replicas (on the
    connection, and the master, the calls went on), and the producer's
    statistics (id, JSON) when given."""
    requests: list[Request] = []
    bookkeeping: dict[int, str] = {}
    if register:
        bookkeeping[len(requests)] = "queue registry"
        requests.append(Command(("SADD", queues_set(on.namespace), logical_name(queue))))
    out = PublishBatch(requests, len(requests), len(calls), bookkeeping=bookkeeping)
    requests.extend(calls)
    if on.wait_replicas:
        out.waited = len(requests)
        requests.append(Command(("WAIT", on.wait_replicas, on.wait_timeout_ms), on.keys(queue).pending))
    if producer is not None:
        bookkeeping[len(requests)] = "producer statistics"
        requests.append(scripts.producer_stats(on.namespace, producer[0], producer[1], PRODUCER_TTL_MS))
    return out


def pushed(on: Publisher, queue: str, frames: Sequence[Any], options: Optional[scripts.Options], *,
           register: bool, producer: Optional[tuple[str, str]]) -> Plan[list[tuple[str, bool]]]:
    """The plan of one publish to partition ``queue`` (the drivers run it
    inside ``wrapped``): plain ``frames`` (options None: publish.lua, or one
    LPUSH alone), or (id, payload, dedup key) items with ``options``
    (publish_options.lua). Its answer: per item (its id, True) when queued,
    (the id holding its dedup key, False) when not; [] for plain frames.
    PushRefused if Redis refused messages (saying which were queued),
    NotReplicated (its result: those pairs) if too few replicas have them.
    A publish with nothing riding along (no registry, no statistics, one
    chunk) goes alone: one LPUSH (and its count), or one script call."""
    keys = on.keys(queue)
    if not register and producer is None and len(frames) <= PUBLISH_CHUNK:
        if options is not None:
            call = scripts.publish_options(keys, frames, options, on.stats)
            return cast("list[tuple[str, bool]]", (yield from _alone(on, queue, [call], len(frames))))
        requests: list[Request] = [Command(("LPUSH", keys.pending, *frames))]
        if on.stats:
            requests.append(Command(("HINCRBY", keys.counters, "published", len(frames))))
        yield from _alone(on, queue, requests, len(frames))
        return []
    calls, sizes = plain_calls(keys, frames, on.stats) if options is None else \
        option_calls(keys, frames, options, on.stats)
    try:
        replies = yield from _published(on, queue, calls, sizes, register=register, producer=producer)
    except NotReplicated as exc:  # its result as the one-call path gives it: the pairs
        exc.result = [] if options is None else flat_pairs(exc.result)
        raise
    return [] if options is None else flat_pairs(replies)


def _alone(on: Publisher, queue: str, requests: list[Request], count: int) -> Plan[Any]:
    """One publish command (and its count) with, with wait_replicas, a WAIT
    behind it on the same connection; the publish's reply. PushRefused if
    Redis refused it (it wrote nothing), NotReplicated if too few replicas
    confirmed it."""
    if on.wait_replicas:
        requests.append(Command(("WAIT", on.wait_replicas, on.wait_timeout_ms), on.keys(queue).pending))
    replies = yield requests
    first = replies[0]
    if isinstance(first, UNREACHABLE):
        raise first
    if isinstance(first, rexc.ResponseError):
        raise PushRefused(f"publish to {queue!r}: Redis refused it: {first}", [False] * count)
    if not on.wait_replicas:
        return first
    return confirmed(queue, first, replies[-1], on.wait_replicas, on.wait_timeout_ms)


def _published(on: Publisher, queue: str, calls: Sequence[scripts.Call[Any]], sizes: Sequence[int], *,
               register: bool, producer: Optional[tuple[str, str]]) -> Plan[list[Any]]:
    """Publish script ``calls`` (of ``sizes`` messages) in one round trip
    with the registry and statistics publish_requests() adds; their
    replies. PushRefused if Redis refused any call, saying which messages
    were queued; NotReplicated if too few replicas have them."""
    sent = publish_requests(on, queue, calls, register=register, producer=producer)
    results = yield sent.requests
    replies = publish_replies(sent, results)
    published(sent, queue, sizes, replies, results)
    if on.wait_replicas:
        confirmed(queue, replies, results[sent.waited], on.wait_replicas, on.wait_timeout_ms)
    return replies


def publish_replies(sent: PublishBatch, results: list[Any]) -> list[Any]:
    """The replies of the publish calls of ``sent``, whose batch's replies
    are ``results``. Raises if a master that holds the messages could not
    be reached (whether they were queued is unknown): on a cluster the
    registry and statistics live on other masters, and one of those
    unreachable must not hide that."""
    replies = results[sent.first:sent.first + sent.count]
    unknown = next((r for r in replies if isinstance(r, UNREACHABLE)), None)
    if unknown is not None:
        raise unknown
    return replies


def published(sent: PublishBatch, queue: str, sizes: Sequence[int], replies: list[Any], results: list[Any]) -> None:
    """Raise PushRefused if Redis refused a publish call of ``sent`` (of
    ``sizes`` messages), saying which were queued. The messages queued, a
    refused registry entry or statistics flush (OOM, an ACL NOPERM) must
    not turn that into an error: it is said once."""
    check_queued(queue, sizes, replies)
    for i, what in sent.bookkeeping.items():
        if isinstance(results[i], Exception):
            warn_once(log, f"refused:{what}", "publish to %r: messages queued, but Redis refused the %s "
                      "(said once; later refusals at debug level): %s", queue, what, results[i])


def check_queued(queue: str, sizes: Sequence[int], replies: Sequence[Any]) -> None:
    """Raise PushRefused, saying which messages were queued, if Redis refused
    any of the publish calls (one reply per call of ``sizes`` messages)."""
    queued = [not isinstance(reply, Exception) for reply, n in zip(replies, sizes) for _ in range(n)]
    refusal = next((reply for reply in replies if isinstance(reply, Exception)), None)
    if refusal is not None:
        raise PushRefused(f"publish to {queue!r}: Redis refused {queued.count(False)} of {len(queued)} "
                          f"message(s): {refusal}", queued)
