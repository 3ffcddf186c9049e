"""The Redis operations that move messages: publish (push, push_with), fetch
and screen, take, settle (ack, nack, exchange), promote what is due, and
hand back what a consumer holds (return_stopped, return_held). Every one is
one script call or one round trip; the hot ones go on the held connection.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional, cast

import redis.exceptions as rexc

from smqsup import defaults
from smqsup.errors import BrokerError, PushRefused
from smqsup.store import scripts
from smqsup.store.core.failures import translated, wrapped
from smqsup.store.core.publish_plan import PRODUCER_TTL_MS, PUBLISH_CHUNK, pushed
from smqsup.store.core.replies import LOGGER
from smqsup.store.sync.session import Session

log = logging.getLogger(LOGGER)


class Messages:
    """Publishing, fetching and settling messages (see the module's docstring)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    # --- producing -----------------------------------------------------------

    def publish(self, queue: str, frames: Sequence[Any], options: Optional[scripts.Options], *, register: bool,
                producer: Optional[tuple[str, str]] = None) -> list[tuple[str, bool]]:
        """Queue plain ``frames`` (options None), or (id, payload, dedup key
        or None) items with ``options``, in partition ``queue``, in one
        round trip, with SADD of the queue name when ``register`` and the
        producer's statistics (id, JSON) when given: publish_plan.pushed(),
        whose answer it is. A publish with nothing riding along goes on the
        held connection (the hot path). Raises PushRefused if Redis refused
        messages (saying which were queued), BrokerConnectionError if the
        outcome is unknown, NotReplicated short of wait_replicas."""
        if not register and producer is None and len(frames) <= PUBLISH_CHUNK:
            if options is None:
                self._push_alone(queue, frames)
                return []
            return self._with_options_alone(queue, frames, options)
        plan = pushed(self._session, queue, frames, options, register=register, producer=producer)
        return self._session.run(plan, f"publish to {queue!r}")

    def push(self, queue: str, frames: Sequence[bytes], *, register: bool,
             producer: Optional[tuple[str, str]] = None) -> None:
        """publish() of plain frames (publish.lua: LPUSH and count, up to
        PUBLISH_CHUNK frames a call)."""
        self.publish(queue, frames, None, register=register, producer=producer)

    def _push_alone(self, queue: str, frames: Sequence[bytes]) -> None:
        """push() of one chunk and nothing else, on the held connection: one
        LPUSH (the move, atomic by itself) and, with statistics on, the
        count pipelined behind it in the same write. Not publish.lua: a
        script call costs Redis several times an LPUSH (12.6 against 1.6 µs
        measured), and a message waits behind it. Only the count can come out
        wrong (Redis gone between the two commands, a key of the wrong
        type), never the message."""
        session = self._session
        k = session.keys(queue)
        commands: list[tuple[Any, ...]] = [("LPUSH", k.pending, *frames)]
        if session.stats:
            commands.append(("HINCRBY", k.counters, "published", len(frames)))
        with wrapped(f"publish to {queue!r}"):
            pushed = session.held.execute_many(*commands, raise_error=False)[0]
            if isinstance(pushed, rexc.ResponseError):  # refused: LPUSH wrote nothing
                raise PushRefused(f"publish to {queue!r}: Redis refused it: {pushed}", [False] * len(frames))
            session.replicated(queue, None)

    def _with_options_alone(self, queue: str, items: Sequence[tuple[str, bytes, Optional[str]]],
                            options: scripts.Options) -> list[tuple[str, bool]]:
        """publish() of one chunk with options and nothing else: one script
        call on the held connection, as _push_alone."""
        session = self._session
        with wrapped(f"publish to {queue!r}"):
            try:
                pairs = scripts.publish_options(session.keys(queue), items, options, session.stats).run(session.held)
            except rexc.ResponseError as exc:  # refused before it wrote anything
                raise PushRefused(f"publish to {queue!r}: Redis refused it: {exc}", [False] * len(items)) from exc
            return session.replicated(queue, pairs)

    def push_with(self, queue: str, items: Sequence[tuple[str, bytes, Optional[str]]], options: scripts.Options,
                  *, register: bool, producer: Optional[tuple[str, str]] = None) -> list[tuple[str, bool]]:
        """publish() of items with ``options`` (publish_options.lua, up to
        PUBLISH_CHUNK items a call): per item, (its id, True) when queued,
        (the id holding its dedup key, False) when not."""
        return self.publish(queue, items, options, register=register, producer=producer)

    def producer_stats(self, producer_id: str, info: str) -> None:
        """Flush one producer's statistics on their own (at close)."""
        session = self._session
        with wrapped("producer statistics"):
            scripts.producer_stats(session.namespace, producer_id, info, PRODUCER_TTL_MS).run(session.client)

    # --- consuming -----------------------------------------------------------

    def fetch(self, queue: str, consumer_id: str, block_s: float) -> tuple[Optional[bytes], bool]:
        """BLMOVE the oldest pending frame into the consumer's list (None on
        timeout), and whether the queue was paused right after (same round
        trip: the flag is read after the move, so a frame taken after a
        pause is known as such; Consumer hands it back with screen())."""
        k = self._session.keys(queue)
        with wrapped(f"fetch from {queue!r}"):
            frame, paused = self._session.held.execute_many(
                ("BLMOVE", k.pending, k.processing(consumer_id), "RIGHT", "LEFT", block_s), ("EXISTS", k.paused),
                raise_error=False)
            if isinstance(frame, rexc.ResponseError):  # BLMOVE refused: it moved nothing
                if "unknown command" in str(frame).lower():
                    # INFO may have been refused at start, so nobody has checked the version.
                    raise BrokerError(f"fetch from {queue!r}: Redis has no BLMOVE ({frame}): smqsup needs "
                                      f"Redis >= 6.2") from frame
                raise frame
        # The flag unread (a cluster refused EXISTS alone, mid-resharding): as
        # if paused, so the frame is screened (screen.lua reads the flag).
        return cast(Optional[bytes], frame), bool(paused) or isinstance(paused, Exception)

    def take(self, queue: str, consumer_id: str, count: int = 1,
             rate: scripts.Rate = scripts.NO_RATE) -> scripts.TakeResult:
        """Take up to ``count`` ready frames (priorities first) without
        blocking, checking the consumer's registration and the paused flag,
        each start booked under the queue's ``rate`` limit."""
        with wrapped(f"fetch from {queue!r}"):
            return scripts.take(self._session.keys(queue), consumer_id, count, rate).run(self._session.held)

    def exchange(self, queue: str, calls: Sequence[scripts.Call[Any]]) -> list[Any]:
        """Run ``calls`` (acks, nacks, a take: a concurrent consumer's settles
        and fetches) in one round trip on the held connection; their results
        in order. A script the server does not know (NOSCRIPT: it did not run)
        is sent again alone by its text. An error reply raises BrokerError
        once every reply is read: which calls ran is then known only from
        Redis (the consumer's recovery reads its own list)."""
        session = self._session
        with wrapped(f"ack and fetch on {queue!r}"):
            if len(calls) == 1:  # a sequential consumer's settle: the same contract, without the batch's lists
                results = [calls[0].run(session.held)]
            else:
                results = self._exchanged(calls)
            if session.wait_replicas:
                session.settled(queue)
            return results

    def _exchanged(self, calls: Sequence[scripts.Call[Any]]) -> list[Any]:
        """exchange()'s round trip for more than one call: the results in order."""
        hot = self._session.held
        replies = hot.execute_many(
            *(("EVALSHA", c.script.sha, len(c.keys), *c.keys, *c.args) for c in calls), raise_error=False)
        results = []
        for call, reply in zip(calls, replies):
            if isinstance(reply, rexc.NoScriptError):
                reply = call.script(hot, call.keys, call.args)
            elif isinstance(reply, Exception):
                raise reply
            results.append(call.read(reply))
        return results

    def screen(self, queue: str, consumer_id: str, frame: bytes,
               rate: scripts.Rate = scripts.NO_RATE) -> tuple[int, int, Optional[bytes]]:
        """(scripts.HANDLE, GIVEN_BACK (paused), EXPIRED, RATE_LIMITED (given
        back), NO_TURN or GONE; µs to wait; the frame a group's ticket was
        redeemed for, or None) for a frame fetch() just moved into the
        consumer's list."""
        with wrapped(f"fetch from {queue!r}"):
            return scripts.screen(self._session.keys(queue), consumer_id, frame, rate).run(self._session.held)

    def ack(self, queue: str, consumer_id: str, frame: bytes, fetch_next: bool,
            rate: scripts.Rate = scripts.NO_RATE) -> scripts.AckResult:
        """Remove ``frame`` from the consumer's list and, with ``fetch_next``,
        take the next frame in the same script call (one round trip)."""
        session = self._session
        with wrapped(f"ack on {queue!r}"):
            result = scripts.ack(session.keys(queue), consumer_id, frame, fetch_next, session.stats, rate).run(session.held)
            if session.wait_replicas:
                session.settled(queue)
            return result

    def nack(self, queue: str, consumer_id: str, frame: bytes, *, retry_threshold: int, delay_ms: int,
             meta: str, fetch_next: bool, dead_event: str = "",
             rate: scripts.Rate = scripts.NO_RATE) -> scripts.NackResult:
        """Count a failed attempt of ``frame`` (retried, delayed or
        dead-lettered) and, with ``fetch_next``, take the next frame in the
        same script call."""
        session = self._session
        with wrapped(f"nack on {queue!r}"):
            result = scripts.nack(session.keys(queue), consumer_id, frame, retry_threshold=retry_threshold,
                                  delay_ms=delay_ms, meta=meta, fetch_next=fetch_next,
                                  dead_event=dead_event, rate=rate).run(session.held)
            if session.wait_replicas:
                session.settled(queue)
            return result

    def promote(self, queue: str, *, lock: Optional[scripts.Lock] = None,
                batch: int = defaults.PROMOTE_BATCH) -> scripts.PromoteResult:
        """Make due retries and scheduled messages ready, at most ``batch``."""
        with wrapped(f"promote on {queue!r}"):
            return scripts.promote(self._session.keys(queue), batch=batch, lock=lock).run(self._session.client)

    def advance(self, queue: str, ahead_s: Optional[float]) -> int:
        """The retries and scheduled messages of ``queue`` due within
        ``ahead_s`` (None: all) brought that much earlier (the testing
        kit's time moved forward; promote() then moves them)."""
        with wrapped(f"move time forward on {queue!r}"):
            ahead_ms = None if ahead_s is None else int(ahead_s * 1000)
            return scripts.advance(self._session.keys(queue), ahead_ms).run(self._session.client)

    def promote_many(self, locks: Mapping[str, scripts.Lock], *,
                     batch: int = defaults.PROMOTE_BATCH) -> dict[str, "scripts.PromoteResult | BrokerError"]:
        """promote() on each queue of ``locks`` (queue -> the collector lock
        it runs under) in one round trip (on a cluster, one per master): each
        queue's result, or its error (NotLeader when its lock was lost)."""
        calls = scripts.Batch(self._session.client)
        for queue, lock in locks.items():
            calls.add(scripts.promote(self._session.keys(queue), batch=batch, lock=lock))
        if not len(calls):
            return {}
        with wrapped("promote on the queues"):
            replies = self._session.send(calls)
        return {queue: translated(f"promote on {queue!r}", r) or BrokerError(f"promote on {queue!r}: {r}")
                if isinstance(r, Exception) else r for queue, r in zip(locks, replies)}

    def processing(self, queue: str, consumer_id: str) -> list[bytes]:
        """The frames in the consumer's list, oldest first."""
        with wrapped(f"read processing list of {queue!r}"):
            frames = cast(list[bytes], self._session.client.lrange(self._session.keys(queue).processing(consumer_id), 0, -1))
        return frames[::-1]

    # --- handing back ----------------------------------------------------------

    def return_stopped(self, queue: str, consumer_id: str, *, reason: str) -> scripts.ReclaimResult:
        """Return the list of a consumer whose stop was asked for (or that
        re-registers under a new id) to the queue, free of cost; unregister it
        once its list is empty, as Registry.reclaim_dead does."""
        session = self._session
        return session.drain(queue, scripts.reclaim(session.keys(queue), consumer_id, costs_attempt=False,
                                                 retry_threshold=0, reason=reason, batch=session.reclaim_batch))

    def return_held(self, queue: str, consumer_id: str, *, reason: str) -> scripts.ReclaimResult:
        """Return, free of cost, what a supervised consumer still holds as it
        stops on its own; the registry is not touched (its supervisor
        unregisters it when it reaps it)."""
        session = self._session
        return session.drain(queue, scripts.return_free(session.keys(queue), consumer_id, reason=reason,
                                                     batch=session.reclaim_batch))
