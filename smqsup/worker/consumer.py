"""The consumer loop: fetch one message, run the handler, ack or nack.

    pending ──BLMOVE──▶ processing:CID ──▶ handler(message)
          ▲                                   │ returned ─▶ ack.lua: LREM + LMOVE next
          └──────── nack.lua ◀────────────────┤ raised   ─▶ attempts+1, then pending,
                                              │             delayed or dead-letter
                                              └ undecodable ─▶ dead-letter "malformed"

(Due delayed messages are moved back to pending by the elected garbage
collector, gc.py, not by consumers.)

When the queue is busy, the ack of one message and the fetch of the next are
one round trip (ack.lua / nack.lua take the next frame); only an empty queue
costs a blocking BLMOVE.

No fork and no signals here: the supervisor's child or the ``consume``
command owns those and calls ``request_stop()``, which is safe to call from a
signal handler (it only sets a flag). The loop stops between messages.

Identity: if the garbage collector declared this consumer dead (it was
paused past heartbeat_timeout) its messages were requeued and its registry
entry removed. The ack script then reports "not registered" and fetches
nothing more; the consumer stops (``on_lost="stop"``, a supervisor child,
which its parent replaces) or registers again under a new id
(``on_lost="renew"``, a standalone consumer).

Failure handling: the Redis client never retries on its own (broker.py). After
any connection error the loop keeps the outcome it could not record, waits
for Redis with backoff, then looks at its own processing list: it records the
kept outcome if the frame is still there, and handles every other frame it
finds there (a BLMOVE whose reply was lost) before it fetches again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from smqsup import defaults, message, safe
from smqsup.client import options
from smqsup.config.model import Config, QueueConfig
from smqsup.errors import BrokerConnectionError, BrokerError, MalformedMessage
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.store.consumer_info import ConsumerInfo
from smqsup.worker.partitions import Partitions
from smqsup.worker.verdicts import Reject, Retry

log = logging.getLogger(__name__)

Handler = Callable[[message.Message], Any]
#: Called with the message a handler is about to run, then with None once its
#: outcome is recorded in Redis (or could not be).
BusyHook = Callable[[Optional[message.Message]], None]
#: Called when the consumer, nothing in hand, is about to wait for the queue
#: (a blocking fetch): at most once a blocking fetch, never per message.
IdleHook = Callable[[], None]

#: Longest traceback text kept in a dead letter, in characters.
_TRACEBACK_CHARS = 4000
#: Longest exception text kept in a dead letter (and its reason), in characters.
_ERROR_CHARS = 4000


@dataclass
class ConsumerStats:
    """What this consumer has done since it started (flushed by the stats layer)."""

    received: int = 0
    acked: int = 0
    retried: int = 0  # nacked back to pending or the delayed set
    dead_lettered: int = 0
    malformed: int = 0
    late_acks: int = 0  # settled after the message had been reclaimed
    expired: int = 0  # taken by a blocking fetch past their ttl: dead-lettered unhandled
    rejected: int = 0  # handlers raised Reject
    busy_s: float = 0.0  # total time spent in the handler


@dataclass(frozen=True)
class Outcome:
    """What should happen to a frame once its handler has run."""

    ok: bool
    meta: str = ""  # dead-letter metadata (failures only)
    threshold: int = 0  # retry_threshold, or -1 to dead-letter at once
    delay_ms: int = 0
    dead_event: str = ""  # a counter to add 1 to when dead-lettered ("rejected")


def _text_of(exc: BaseException) -> str:
    """An exception's text, bounded, secrets masked (safe.scrub: a Redis
    password, the web token): it is stored in a dead letter, which status,
    the API and the page show. Never raises."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails
        return f"<{type(exc).__name__}: str() failed>"
    # Scrubbed before the cut, so that no secret's head survives it.
    return safe.scrub(text[:2 * _ERROR_CHARS])[:_ERROR_CHARS]


def refuse_generator(result: object) -> None:
    """Raise TypeError (a failed attempt) when a handler returned a generator:
    its body never ran. (Generator functions are refused at import; this is
    a plain function that returned one, a decorator's, say.)"""
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        raise TypeError(f"the handler returned {type(result).__name__} {getattr(result, '__qualname__', '')!s}"
                        " without running it: a handler must return or raise, not yield")


def fetch_block_s(cfg: Config) -> float:
    """How long one BLMOVE may block: at most a quarter of heartbeat_timeout.

    Invariant: a consumer paused (SIGSTOP) inside BLMOVE stops being a
    destination for messages when its BLMOVE times out, server-side; that must
    happen well before the collector can declare it dead and empty its list,
    or a message could be moved into a list nobody watches any more."""
    return min(defaults.FETCH_BLOCK_S, cfg.heartbeat_timeout_s / 4)


def look_again_at(wait_us: int) -> float:
    """When (monotonic) to ask a rate limit that allowed no start again:
    after the wait it said, but never later than RATE_LOOK_MAX_S from now,
    so that a limit raised since (a reload), a rate key deleted or repaired,
    or a Redis clock stepped back is followed within that."""
    return time.monotonic() + min(wait_us / 1e6, defaults.RATE_LOOK_MAX_S)


def new_consumer_id(queue: str) -> str:
    """A consumer id unique across hosts and restarts: host, pid and random."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class Consumer:
    """Consumes one queue with one handler until ``request_stop()`` or
    ``max_messages``. ``run()`` returns why it stopped: "stopped" or
    "max_messages"."""

    def __init__(
        self,
        broker: Broker,
        queue: QueueConfig,
        handler: Handler,
        *,
        consumer_id: Optional[str] = None,
        fetch_block_s: float = defaults.FETCH_BLOCK_S,
        on_busy: Optional[BusyHook] = None,
        on_idle: Optional[IdleHook] = None,
        on_lost: str = "renew",
        unregister_on_stop: bool = True,
    ) -> None:
        self.broker = broker
        self.queue = queue
        #: The partitions of the queue; ``name`` is the current one (the
        #: queue itself without partitions), where every call below goes.
        self.partitions = Partitions(queue.name, queue.partitions)
        self.name = queue.name
        self._rotate = False  # look at the other partitions before the current one
        self.handler = handler
        self.consumer_id = consumer_id or new_consumer_id(queue.name)
        self.stats = ConsumerStats()
        self._fetch_block_s = fetch_block_s
        self._on_busy = on_busy
        self._on_idle = on_idle
        self._on_lost = on_lost
        self._unregister_on_stop = unregister_on_stop
        self._lost = False
        self._registration_checked = False  # by the ack/nack script just run
        self._stop = False
        self._unsettled: Optional[tuple[bytes, Outcome]] = None
        self._recover_needed = True
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._registered = False
        self._busy = False
        self._paused = False
        #: The queue's rate limit (scripts.Rate: its share per partition is
        #: the scripts') and what it said last: µs to hold the frame in hand
        #: before its handler starts (its booked start), and when (monotonic)
        #: to look again after it allowed none.
        self._rate: scripts.Rate = (*queue.rate, len(self.partitions.names))
        self._limited = queue.rate_limit_per_s > 0
        self._hold_us = 0
        self._look_at = 0.0

    # --- control -------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop after the message in hand (safe inside a signal handler)."""
        self._stop = True

    @property
    def stopping(self) -> bool:
        return self._stop

    @property
    def busy(self) -> bool:
        """Whether a handler is running now (read from another thread: a hint)."""
        return self._busy

    @property
    def concurrency(self) -> int:
        """Messages this consumer runs at once (1: one after another)."""
        return 1

    def flight(self) -> tuple[int, int]:
        """(messages in flight, monotonic µs since the oldest of them started,
        0 meaning "just now"): what the busy hook reports."""
        return (1 if self._busy else 0), 0

    @property
    def registered(self) -> bool:
        """Whether the consumer has entered the registry (its heartbeats may flow)."""
        return self._registered

    def identity_lost(self, consumer_id: str) -> None:
        """The collector declared ``consumer_id`` dead (a heartbeat said so).
        Thread-safe: only sets a flag the loop reads between messages."""
        if consumer_id == self.consumer_id:
            self._lost = True

    def _limit_reached(self) -> bool:
        limit = self.queue.max_messages
        return bool(limit) and self.stats.received >= limit

    # --- main loop -----------------------------------------------------------

    def start(self) -> None:
        """Register in the queue's consumer registry, waiting for Redis as long
        as it takes (or until a stop is requested). run() calls it if needed."""
        if not self._registered:
            self._registered = self._wait_for_redis(self._register)

    def run(self) -> str:
        """Consume until asked to stop; return "stopped" or "max_messages"."""
        self.start()
        backoff = defaults.RECONNECT_BACKOFF_MIN_S
        frame: Optional[bytes] = None
        while not self._stop and not self._limit_reached():
            try:
                if self._lost:
                    frame = self._handle_lost(frame)
                    continue
                if self._recover_needed:
                    frame = None
                    self._recover()
                    backoff = defaults.RECONNECT_BACKOFF_MIN_S
                    continue
                if frame is None:
                    frame = self._fetch()
                    if frame is None:
                        continue
                if self._hold_us and not self._hold():
                    break  # stopped while waiting for its start: _finish gives it back free
                frame = self._process(frame, fetch_next=True)
            except BrokerError as exc:
                # Connection lost, or Redis refusing (LOADING, READONLY after a
                # failover, OOM): wait, then re-read our own list before going on.
                frame = None
                self._recover_needed = True
                self._registration_checked = False
                log.warning("queue %s: consumer %s: %s; retrying in %.2fs",
                            self.name, self.consumer_id, exc, backoff)
                self._pause(backoff)
                backoff = min(backoff * 2, defaults.RECONNECT_BACKOFF_MAX_S)
        self._finish()
        if self._lost and self._on_lost == "stop":
            return "declared dead"
        return "max_messages" if self._limit_reached() and not self._stop else "stopped"

    def _fetch(self) -> Optional[bytes]:
        """The next frame for this consumer, or None (nothing came within the
        block time, the queue is paused, or we were declared dead)."""
        # Never BLMOVE into a list the collector no longer watches, nor while
        # a ready message may wait in the priority set: the ack or nack script
        # just before has checked both in the same round trip; otherwise (after
        # a fetch timeout, a reconnect, while paused) take.lua asks.
        # A rate limit that allowed no start: wait until it may, then ask
        # take.lua (the queue is not empty: no BLMOVE).
        checked, self._registration_checked = self._registration_checked, False
        if self._rotate:
            self._rotate = False
            stolen = self._steal()
            if stolen is not None or self._lost:
                return stolen
        if self._look_at:
            self._pause(self._look_at - time.monotonic())
            self._look_at = 0.0
            checked = False
        if self._paused or not checked:
            if self._paused:
                self._pause(defaults.PAUSED_POLL_S)
            took = self.broker.messages.take(self.name, self.consumer_id, 1, self._rate)
            if not took.registered:
                self._lost = True
                return None
            self._note_paused(took.paused)
            self._rate_said(took.next_frame, took.waits_us[0] if took.frames else took.retry_us)
            if took.paused or took.frames or took.retry_us:
                return took.next_frame
        if self.partitions.many:
            # The current partition is empty: the others, then home to block.
            stolen = self._steal()
            if stolen is not None or self._lost:
                return stolen
            self._move(self.partitions.home)
        return self._block()

    def _block(self) -> Optional[bytes]:
        """Wait for the queue (BLMOVE), nothing in hand: the frame it gave,
        screened when it must be, or None."""
        if self._on_idle is not None:
            self._on_idle()
        frame, paused = self.broker.messages.fetch(self.name, self.consumer_id, self._fetch_block_s)
        if frame is not None and (paused or self._limited or message.has_expiry(frame)):
            return self._screen(frame)
        return frame

    def _steal(self) -> Optional[bytes]:
        """Take one frame from the first other partition that has one (not
        paused, its rate limit allowing a start) and move there; None if
        none had one."""
        for name in self.partitions.others():
            took = self.broker.messages.take(name, self.consumer_id, 1, self._rate)
            if not took.registered:
                self._move(name)  # declared dead there: renew our identity
                self._lost = True
                return None
            if took.frames and not took.paused:
                self._move(name)
                self._rate_said(took.next_frame, took.waits_us[0])
                return took.next_frame
        return None

    def _move(self, name: str) -> None:
        """Work on partition ``name`` from now on (nothing in hand)."""
        if name != self.name:
            self.name = name
            self._paused = False  # that partition's flag: the next script says
        self.partitions.move(name)

    def _hold(self) -> bool:
        """Wait for the booked start of the frame in hand (rate limit); False
        if a stop came meanwhile (the frame, never handled, goes back free)."""
        hold, self._hold_us = self._hold_us, 0
        self._pause(hold / 1e6)
        return not self._stop

    def _screen(self, frame: bytes) -> Optional[bytes]:
        """A frame a blocking fetch took, when the queue turned out paused,
        the frame carries an expiry or the queue has a rate limit: the frame
        to handle (its start booked: ``_hold_us``), or None (given back to a
        paused or rate-limited queue, expired, or reclaimed meanwhile)."""
        verdict, wait_us = self.broker.messages.screen(self.name, self.consumer_id, frame, self._rate)
        if verdict == scripts.HANDLE:
            self._hold_us = wait_us
        elif verdict == scripts.RATE_LIMITED:
            self._no_start(wait_us)
        elif verdict == scripts.GIVEN_BACK:
            self._note_paused(True)
        elif verdict == scripts.EXPIRED:
            self.stats.expired += 1
            log.info("queue %s: message %s expired before a handler took it; dead-lettered",
                     self.name, message.peek_id(frame))
        return frame if verdict == scripts.HANDLE else None

    def _note_paused(self, paused: bool) -> None:
        """Follow the queue's paused flag, saying each change once."""
        if paused != self._paused:
            log.info("queue %s: consumer %s %s", self.name, self.consumer_id,
                     "waits: the queue is paused" if paused else "goes on: the queue was resumed")
            self._paused = paused

    def _handle_lost(self, frame: Optional[bytes]) -> Optional[bytes]:
        """Declared dead: stop, or go on under a new id. A frame in hand (taken
        before we knew) is handled first: it is in our list, so its ack works."""
        if frame is not None:
            self._process(frame, fetch_next=False)
        self._renew_identity()
        return None

    def _renew_identity(self) -> None:
        """Declared dead, nothing in hand: stop (``on_lost="stop"``) or go on
        under a new id."""
        log.warning("queue %s: consumer %s was declared dead by the garbage collector (paused past "
                    "heartbeat_timeout); its messages were requeued", self.name, self.consumer_id)
        if self._on_lost == "stop":
            self._stop = True
            return
        old = self.consumer_id
        self.consumer_id = new_consumer_id(self.name)
        self._registered = False
        self._lost = False
        self.start()
        # Anything moved into the old list after the collector emptied it goes
        # back, free: those messages were never handed to a handler.
        for name in self.partitions.names:
            self.broker.messages.return_stopped(name, old, reason="consumer re-registered")
        log.info("queue %s: consumer %s continues as %s", self.name, old, self.consumer_id)

    def _process(self, frame: bytes, *, fetch_next: bool) -> Optional[bytes]:
        """Handle one frame and record the outcome; return the next frame when
        ``fetch_next`` and the queue had one."""
        self.stats.received += 1
        outcome = self._run_handler(frame)
        self._unsettled = (frame, outcome)
        if self.partitions.handled():
            self._rotate = fetch_next  # settle without the next frame: _fetch looks at the others first
        fetch = fetch_next and not self._stop and not self._limit_reached() and not self._rotate
        try:
            nxt = self._settle(frame, outcome, fetch)
        finally:
            if self._on_busy is not None:
                self._on_busy(None)
        self._unsettled = None
        return nxt

    def _decode(self, frame: bytes) -> "message.Message | Outcome":
        """The message a frame holds, or the outcome of a frame that holds
        none (dead-lettered "malformed" at once)."""
        try:
            return message.decode(frame)  # raises MalformedMessage and nothing else, whatever the bytes
        except MalformedMessage as exc:
            self.stats.malformed += 1
            log.error("queue %s: malformed message dead-lettered (%s)", self.name, exc)
            meta = scripts.meta_json("malformed", error=_text_of(exc), consumer=self.consumer_id)
            return Outcome(False, meta, threshold=-1)

    def _run_handler(self, frame: bytes) -> Outcome:
        msg = self._decode(frame)
        if isinstance(msg, Outcome):
            return msg
        if self._on_busy is not None:
            self._on_busy(msg)
        started = time.perf_counter()
        self._busy = True
        try:
            result = self.handler(msg)
            if result is not None:
                if inspect.isawaitable(result):
                    self._event_loop().run_until_complete(result)
                else:
                    refuse_generator(result)
        except Exception as exc:  # noqa: BLE001 - any handler failure is an unack
            return self._judged(msg, exc)
        finally:
            self._busy = False
            self.stats.busy_s += time.perf_counter() - started
        return Outcome(True)

    def _judged(self, msg: message.Message, exc: Exception) -> Outcome:
        """The outcome of a handler that raised ``exc``: a dead letter now
        (Reject) or a failed attempt. Whatever goes wrong while judging it
        (a Reject or Retry subclass that skipped its ``__init__``, a delay
        set to NaN afterwards, an exception whose attributes raise) is a
        failed attempt too: an outcome that cannot be drawn must never leave
        its message unsettled in our list, where a graceful stop would hand
        it back free for ever."""
        try:
            return self._rejected(msg, exc) if isinstance(exc, Reject) else self._failure(msg, exc)
        except Exception as failed:  # noqa: BLE001 - see the docstring
            text = f"{type(exc).__name__} could not be judged ({type(failed).__name__}: {_text_of(failed)})"
            log.error("queue %s: message %s: %s; counted as a failed attempt", self.name, msg.id,
                      safe.scrub(text))
            q = self.queue
            meta = scripts.meta_json(safe.scrub(text), error_type=type(exc).__name__, message_id=msg.id,
                                     consumer=self.consumer_id)
            return Outcome(False, meta, threshold=q.retry_threshold, delay_ms=int(q.retry_delay_s * 1000))

    def _rejected(self, msg: message.Message, exc: Reject) -> Outcome:
        """Reject: dead-letter now, whatever the attempts."""
        self.stats.rejected += 1
        reason = _text_of(exc)
        log.warning("queue %s: message %s rejected by its handler: %s", self.name, msg.id, reason)
        meta = scripts.meta_json(f"rejected: {reason}", error_type="Reject", error=reason, message_id=msg.id,
                                 consumer=self.consumer_id)
        return Outcome(False, meta, threshold=-1, dead_event="rejected")

    def _failure(self, msg: message.Message, exc: Exception) -> Outcome:
        kind = type(exc).__name__
        text = _text_of(exc)
        log.warning("queue %s: message %s failed on attempt %d: %s: %s",
                    self.name, msg.id, msg.attempts + 1, kind, text)
        try:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            tb = safe.scrub(tb[-2 * _TRACEBACK_CHARS:])[-_TRACEBACK_CHARS:]
        except Exception:  # noqa: BLE001 - a traceback that cannot be formatted is left out
            tb = ""
        meta = scripts.meta_json(f"{kind}: {text}", error_type=kind, error=text, message_id=msg.id,
                                 consumer=self.consumer_id, traceback=tb)
        return Outcome(False, meta, threshold=self.queue.retry_threshold,
                       delay_ms=int(self._retry_delay_s(msg, exc) * 1000))

    def _retry_delay_s(self, msg: message.Message, exc: Exception) -> float:
        """A Retry's own delay when it holds one Retry would accept (finite,
        0 to ten years: a subclass may have skipped Retry's checks, or set
        it afterwards); else the queue's retry_delay, backed off."""
        q = self.queue
        if isinstance(exc, Retry):
            delay_s = getattr(exc, "delay_s", None)
            if isinstance(delay_s, (int, float)) and not isinstance(delay_s, bool) \
                    and 0 <= delay_s <= options.MAX_SPAN_S:  # (NaN fails both)
                return float(delay_s)
            log.warning("queue %s: message %s: %s.delay_s is not a delay (%s); the queue's retry_delay applies",
                        self.name, msg.id, type(exc).__name__, safe.escape(repr(delay_s), 100))
        try:
            return float(min(q.retry_delay_s * (q.retry_backoff ** min(msg.attempts, 1000)), q.retry_delay_max_s))
        except OverflowError:
            return q.retry_delay_max_s

    def _settle(self, frame: bytes, outcome: Outcome, fetch: bool) -> Optional[bytes]:
        if outcome.ok:
            ack = self.broker.messages.ack(self.name, self.consumer_id, frame, fetch, self._rate)
            self._rate_said(ack.next_frame, ack.wait_us)
            if ack.acked:
                self.stats.acked += 1
            else:
                self._late(frame)
            if not ack.registered:
                self._lost = True
            # Only a script that looked for the next frame has checked the
            # priority set too; otherwise _fetch asks take.lua first.
            self._registration_checked = ack.registered and fetch
            self._note_paused(ack.paused)
            return ack.next_frame
        nack = self.broker.messages.nack(self.name, self.consumer_id, frame, retry_threshold=outcome.threshold,
                                         delay_ms=outcome.delay_ms, meta=outcome.meta, fetch_next=fetch,
                                         dead_event=outcome.dead_event, rate=self._rate)
        self._rate_said(nack.next_frame, nack.wait_us)
        if not nack.registered:
            self._lost = True
        self._registration_checked = nack.registered and fetch
        self._note_paused(nack.paused)
        if nack.outcome == scripts.LATE:
            self._late(frame)
        elif nack.outcome == scripts.DEAD:
            self.stats.dead_lettered += 1
        else:
            self.stats.retried += 1
        return nack.next_frame

    def _rate_said(self, nxt: Optional[bytes], wait_us: int) -> None:
        """Follow what a fetch said of the rate limit: hold the frame it took
        until its booked start, or (none taken) look again when allowed."""
        if nxt is not None:
            self._hold_us = wait_us
        elif wait_us:
            self._no_start(wait_us)

    def _no_start(self, wait_us: int) -> None:
        """The rate limit allowed no start now: look again then (at most
        RATE_LOOK_MAX_S), and at the other partitions first, whose share
        may allow one."""
        self._look_at = look_again_at(wait_us)
        self._rotate = self._rotate or self.partitions.many

    def _late(self, frame: bytes) -> None:
        self.stats.late_acks += 1
        log.warning("queue %s: late ack of message %s by consumer %s: it had been reclaimed; no-op",
                    self.name, message.peek_id(frame), self.consumer_id)

    # --- recovery ------------------------------------------------------------

    def _recover(self) -> None:
        """Deal with what our processing list holds before fetching again."""
        self.broker.ping()
        self._return_elsewhere()
        held = self.broker.messages.processing(self.name, self.consumer_id)
        if self._unsettled is not None:
            frame, outcome = self._unsettled
            if frame in held:
                # The outcome was not recorded: record it now.
                self._settle(frame, outcome, fetch=False)
                held.remove(frame)
            elif not self.broker.registry.is_registered(self.name, self.consumer_id):
                # Gone because the collector reclaimed it while Redis was
                # away from us: someone else handles it again. Count it.
                self.broker.registry.count_late_ack(self.name)
                self._late(frame)
                self._lost = True
            # (Else our own settle ran before the connection broke.)
            self._unsettled = None
        for found in held:
            # Delivered to us but never handled (its BLMOVE reply was lost):
            # screened first, as the fetch would have (paused, expired).
            taken = self._screen(found)
            if taken is not None:
                log.info("queue %s: consumer %s handles message %s found in its list",
                         self.name, self.consumer_id, message.peek_id(taken))
                if self._hold_us and not self._hold():
                    break
                self._process(taken, fetch_next=False)
            if self._stop:
                break
        self._recover_needed = False

    def _return_elsewhere(self) -> None:
        """Give back, free, what our lists in the other partitions hold: only
        a take whose reply was lost can leave a frame there (we change
        partition with nothing in hand), never handed to a handler."""
        for name in self.partitions.others():
            self.broker.messages.return_held(name, self.consumer_id, reason="taken while the connection broke")

    def _wait_for_redis(self, action: Callable[[], None]) -> bool:
        """Run ``action`` until Redis takes it (True) or a stop is requested (False)."""
        backoff = defaults.RECONNECT_BACKOFF_MIN_S
        while True:
            try:
                action()
                return True
            except BrokerError as exc:
                # Unreachable, or refusing for now (OOM, a registry key of the
                # wrong type): a consumer that gave up here would crash-loop its
                # queue into FATAL over what an operator fixes in Redis.
                if self._stop:
                    log.warning("queue %s: consumer %s stops before it could register: %s",
                                self.name, self.consumer_id, exc)
                    return False
                why = "unreachable" if isinstance(exc, BrokerConnectionError) else "refusing"
                log.warning("queue %s: Redis %s (%s); retrying in %.2fs", self.name, why, exc, backoff)
                self._pause(backoff)
                backoff = min(backoff * 2, defaults.RECONNECT_BACKOFF_MAX_S)

    def _register(self) -> None:
        """Enter the registry of every partition (the collector of each must
        find our list there); draw the home partition first."""
        if not self.partitions.drawn:
            count = self.broker.queues.declare_partitions(self.queue.name, self.queue.partitions)
            if count != len(self.partitions.names):  # another host declared more
                self.partitions = Partitions(self.queue.name, count)
                self._rate = (*self.queue.rate, count)
            self.partitions.draw(self.broker.queues.partition_ticket(self.queue.name) if self.partitions.many else 0)
            self._move(self.partitions.home)
        info = ConsumerInfo(pid=os.getpid(), host=socket.gethostname(), queue=self.queue.name, started_at=time.time())
        for name in self.partitions.names:
            self.broker.registry.register_consumer(name, self.consumer_id, info)

    def _finish(self) -> None:
        """Clean exit: return whatever is still in our list (nothing, normally)
        without costing an attempt, and leave the registry."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None
        if self._unsettled is not None:
            log.error("queue %s: consumer %s stops with message %s unsettled (Redis away); "
                      "it stays in its processing list for reclaim",
                      self.name, self.consumer_id, message.peek_id(self._unsettled[0]))
            return
        try:
            # Under a supervisor the parent unregisters us when it reaps us, so
            # that its heartbeat never sees a consumer that merely stopped as
            # one declared dead.
            give_back = self.broker.messages.return_stopped if self._unregister_on_stop else self.broker.messages.return_held
            moved = 0
            for name in self.partitions.names:
                r = give_back(name, self.consumer_id, reason="consumer stopped")
                moved += r.requeued + r.dead_lettered
        except BrokerError as exc:  # unreachable or refusing: the collector reclaims the list later
            log.error("queue %s: consumer %s could not unregister (%s)", self.name, self.consumer_id, exc)
            return
        if moved:
            log.info("queue %s: consumer %s returned %d message(s) on stop", self.name, self.consumer_id, moved)

    def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking early when a stop is requested."""
        deadline = time.monotonic() + seconds
        while not self._stop:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.05))

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop
