"""The consumer engine: one queue, one handler, ``concurrency`` messages at
once, one at a time being its degenerate case.

    pending ──take.lua / BLMOVE (Fetcher; screen.lua when it must)──▶ processing:CID
       ▲                                                               │ up to concurrency + prefetch - 1 frames
       │                                                               ▼
       │     Starter: in take order, each waits for a free slot (prefetched), then
       │     OutcomeDecider.decode ──▶ InFlight.start ──▶ runner.start: inline (1) │ a task or a thread (N)
       │                                                               ▼ the handler returns or raises
       │     _land: OutcomeDecider draws the Outcome (Stopper: past message_timeout, or cancelled)
       │                                                               │ Settler.finished
       │                                                               ▼
       └─ one round trip, Settler.exchange: nack.lua per failure; the acks in one
          take.lua that also takes for the room left (one alone: ack.lua) ──▶ frames

    a Redis error ──▶ Recovery: backoff, then our list against what we hold; declared dead ──▶ stop or renew

The loop is ``_turn``, the same at any concurrency; the runner drives it and waits between two turns. Inline, the
handler runs on this thread before the next round trip: a busy queue costs one round trip per message (the ack takes
the next frame), one per N with ``prefetch`` N (settled with the next take, within SETTLE_WITHIN_S of the first end),
and no thread, task or timer. With concurrency N an event loop waits for handlers running as tasks or on threads; one
round trip settles every message that ended meanwhile. No fork, no signals: the child or ``smqsup consume`` calls
``request_stop()``.

Every message in hand sits in this consumer's own processing list from its take to its ack or nack (LREM by its exact
bytes), so a SIGKILL returns all of them (those started costing an attempt), and a late ack is a counted no-op. A stop
(or ``max_messages``, or an identity declared dead) takes nothing more and lets the messages running finish;
prefetched frames go back free at once (and when the queue is paused), booked ones (the rate limit's) at the end.

message_timeout, one rule: a message past it costs one attempt, and whoever can stop waiting for its handler does. The
runner of tasks and threads can (a task is cancelled, a thread left behind and replaced; reason "timeout"). A handler
holding the consumer's own thread cannot be left, inline or when it blocks the event loop: the supervisor kills it
then (decide.kill_after_s); each started costs an attempt.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from smqsup import defaults
from smqsup.config.model import QueueConfig
from smqsup.errors import BrokerError
from smqsup.store.broker import Broker
from smqsup.worker.consumer_state import OK, Attempt, BusyHook, ConsumerStats, Handler, Identity, IdleHook
from smqsup.worker.fetching import Fetcher
from smqsup.worker.in_flight import InFlight
from smqsup.worker.outcomes import OutcomeDecider
from smqsup.worker.partitions import Partitions
from smqsup.worker.recovery import Recovery
from smqsup.worker.registration import Registration, new_consumer_id
from smqsup.worker.runners import Fetched, InlineRunner, LoopRunner
from smqsup.worker.settling import Settler
from smqsup.worker.starting import Starter
from smqsup.worker.stopping import Stopper

log = logging.getLogger(__name__)

#: Longest the loop waits without looking at its flags (a stop, a lost identity), in s.
_TICK_S = 1.0


class Consumer:
    """Consumes one queue with one handler, up to ``queue.concurrency``
    messages at once, until ``request_stop()``, ``max_messages`` or (with
    ``on_lost="stop"``) being declared dead. ``run()`` returns why it
    stopped: "stopped", "max_messages" or "declared dead"."""

    def __init__(self, broker: Broker, queue: QueueConfig, handler: Handler, *, consumer_id: Optional[str] = None,
                 fetch_block_s: float = defaults.FETCH_BLOCK_S, on_busy: Optional[BusyHook] = None,
                 on_idle: Optional[IdleHook] = None, on_lost: str = "renew", unregister_on_stop: bool = True) -> None:
        self.broker = broker
        self.queue = queue
        self.handler = handler
        self.stats = ConsumerStats()
        self.identity = Identity(consumer_id or new_consumer_id(queue.name))
        self.fetcher = Fetcher(broker, queue, self.identity, self.stats, fetch_block_s)
        self.settler = Settler(broker, self.identity, self.stats, self.fetcher)
        self.decider = OutcomeDecider(queue, self.identity, self.stats)
        self.recovery = Recovery(broker, self.identity, self.fetcher, self.settler)
        self.registration = Registration(broker, queue, self.identity, self.fetcher, lambda: self._stop)
        self.runner: InlineRunner | LoopRunner = (
            LoopRunner(queue.concurrency, handler, self._land, queue.name) if queue.concurrency > 1
            else InlineRunner(handler, self._land, lambda: self._stop))
        self._on_busy, self._on_idle = on_busy, on_idle
        self._on_lost, self._unregister_on_stop = on_lost, unregister_on_stop
        timeout_s = queue.message_timeout_s if self.runner.can_abandon else 0.0  # else: the supervisor's
        self.in_flight = InFlight(int(timeout_s * 1e6))
        self._stop = False
        self._exit: Optional[BaseException] = None  # an after_process's SystemExit: run() raises it at its end
        self._fetching: Optional[Fetched] = None  # the blocking fetch under way
        self._unsettled_left = False  # stopped with outcomes Redis never took: the list is left for reclaim
        self._finished = self.settler.finished  # (one list for the consumer's life)
        self._each_end = None if self.runner.inline else on_busy  # told of each end (not inline: of each settle)
        self._returned = 0  # inline: the finished attempts, from the first, whose handler returned
        self.starter = Starter(queue, self.stats, self.identity, self.fetcher, self.decider, self.in_flight,
                               self.settler, self.runner, on_busy)
        self.stopper = Stopper(broker, self.identity, self.stats, self.fetcher, self.in_flight, self.settler,
                               self.decider, self.runner, on_busy)

    # --- what the supervisor, the heartbeats and the tests read ------------

    @property
    def consumer_id(self) -> str:
        return self.identity.consumer_id

    @property
    def name(self) -> str:
        """The current partition (the queue itself without partitions)."""
        return self.fetcher.name

    @property
    def partitions(self) -> Partitions:
        return self.fetcher.partitions

    @property
    def registered(self) -> bool:
        """Whether the consumer has entered the registry (its heartbeats may flow)."""
        return self.identity.registered

    @property
    def concurrency(self) -> int:
        """Messages this consumer runs at once (1: one after another)."""
        return self.runner.size

    def started(self) -> tuple[int, int]:
        """Frames of our list started and not settled (its oldest: Starter),
        and of those the oldest whose handlers returned (inline only)."""
        return len(self.in_flight.running) + len(self.settler.finished), self._returned

    @property
    def busy(self) -> bool:
        """Whether a handler is running now (read from another thread: a hint)."""
        return self.in_flight.busy

    def flight(self) -> tuple[int, int]:
        """(messages in flight, monotonic µs since the oldest started): what the busy hook reports; any thread."""
        return self.in_flight.flight()

    # --- control -----------------------------------------------------------

    def request_stop(self, exit: Optional[BaseException] = None) -> None:
        """Take nothing more; let what is in hand finish (signal-safe); run() then raises ``exit``, if any."""
        self._exit, self._stop = self._exit or exit, True
        self.starter.stopped = True
        self.runner.wake()

    def request_cancels(self) -> None:
        """A cancel may concern a message we hold: look at the next turn (signal-safe)."""
        self.stopper.cancels_due = True
        self.runner.wake()

    def identity_lost(self, consumer_id: str) -> None:
        """The collector declared ``consumer_id`` dead (a heartbeat said so); thread-safe."""
        if consumer_id == self.identity.consumer_id:
            self.identity.lost = True
            self.runner.wake()

    def start(self) -> None:
        """Register, waiting for Redis as long as it takes (or a stop); run() calls it if needed."""
        if not self.identity.registered:
            self.registration.enter()

    def run(self) -> str:
        """Consume until asked to stop; return why it stopped (or raise the exit a stop asked)."""
        self.start()
        try:
            self.runner.drive(self._turn)
        finally:
            self.runner.close()
        if not self._unsettled_left:
            self.registration.leave(self._unregister_on_stop)
        if self._exit is not None:
            raise self._exit
        if self.identity.lost and self._on_lost == "stop":
            return "declared dead"
        limit = self.queue.max_messages
        return "max_messages" if limit and self.stats.received >= limit and not self._stop else "stopped"

    # --- the loop ----------------------------------------------------------

    def _taking(self) -> bool:
        limit = self.queue.max_messages
        return not (self._stop or self.identity.lost or (limit and self.stats.received >= limit)
                    or self.runner.exhausted)

    def _room(self, taking: bool) -> int:
        """Messages we may take now."""
        if not taking or self.fetcher.rotate_partitions:
            return 0
        in_flight = self.in_flight
        held = len(in_flight.booked) + len(in_flight.waiting) + (self._fetching is not None)
        room = self.starter.capacity - len(in_flight.running) - held
        limit = self.queue.max_messages
        if limit:
            room = min(room, limit - self.stats.received - held)
        return room if room > 0 else 0

    def _turn(self) -> Optional[float]:
        """One turn: what became due, one round trip (every finished outcome recorded, room
        taken), what came started; how long the runner may then wait (s), None once done."""
        try:
            settler, in_flight, f = self.settler, self.in_flight, self.fetcher
            taking = self._taking()
            if not (taking or in_flight.running or settler.finished or self._fetching is not None or in_flight.waiting):
                return self._at_rest()
            if self.recovery.needed:
                return self._recover()
            if self.stopper.cancels_due:
                self.stopper.apply_cancels()
            if self._fetching is not None or in_flight.booked or f.rate_retry_at or (in_flight.timeout_us and in_flight.running):
                self._collect()
                taking = self._taking()
            give_back = self.starter.before_exchange(taking)
            if give_back is None:
                return self._wait_s()  # frames still wait for a slot, and nothing is due
            settles = bool(settler.finished)
            now = time.monotonic()
            poll = f.paused and taking and not settles and self._fetching is None and f.poll_due(now)
            if settles and self.starter.prefetching and self._on_busy is not None:
                self._on_busy(False)  # the slot says which ended before the batch's reply could land
            try:  # the one round trip
                frames = settler.exchange(self._room(taking), poll or self.starter.look_due(now), give_back)
            finally:
                self._returned = 0  # (settled, or unknown after a failure: counted as not returned)
                if settles and self._on_busy is not None:
                    self._on_busy(False)
            self.starter.accept(frames, self._taking)
            if self.recovery.failures:
                self.recovery.worked()
            if f.rotate_partitions:
                self._maybe_rotate()
            if f.found_empty:
                self._maybe_block()
            return 0.0 if settler.finished else self._wait_s()
        except BrokerError as exc:
            return self._failed(exc)

    def _collect(self) -> None:
        """What came due: the blocking fetch's frame, booked starts, a rate look, deadlines."""
        if self._fetching is not None and self._fetching.done():
            self._fetch_done()
        if self.in_flight.booked:
            for frame in self.in_flight.due():
                if self._taking():
                    self.starter.launch(frame)
        if self.fetcher.rate_retry_at:
            self.fetcher.look_due(time.monotonic())
        for att in self.in_flight.overdue():
            self.stopper.time_out(att)

    def _wait_s(self) -> float:
        """How long the runner may wait: 0 with work at hand; else until the
        first thing due, at most _TICK_S (a handler's end, a stop... wake it)."""
        fetching = self._fetching
        if fetching is not None and fetching.done():
            return 0.0
        f = self.fetcher
        taking = self._taking()
        in_flight = self.in_flight
        if not taking and not in_flight.running and fetching is None:
            return 0.0  # nothing more to come: the next turn ends
        if in_flight.waiting and (len(in_flight.running) < self.runner.size or not taking or f.paused):
            return 0.0  # a frame to start, or to give back
        if (taking and not (f.found_empty or f.paused or f.rate_retry_at) and fetching is None and not in_flight.waiting
                and self._room(taking)):
            return 0.0  # room, and no script has looked since: take.lua looks now (waiting frames first)
        now = time.monotonic()
        due = now + _TICK_S
        if f.rate_retry_at:
            due = min(due, f.rate_retry_at)
        if f.paused and taking:
            due = min(due, f.poll_at)
        held = in_flight.next_due()
        if held is not None:
            due = min(due, held)
        waits = self.starter.next_due()
        if waits is not None:
            due = min(due, waits)
        return max(0.0, due - now)

    # --- starting and ending messages ----------------------------------------

    def _land(self, att: Attempt) -> None:
        """A handler ended (the runner tells it on this thread): its outcome is due."""
        if att.error is not None and (exit_asked := att.exit_asked()) is not None:  # a hook's SystemExit: see run()
            self.request_stop(exit_asked)
        if att not in (running := self.in_flight.running):  # given up at its message_timeout: what it did since is moot
            self.runner.came_back(att)
            return
        del running[att]
        self.stats.busy_s += (time.monotonic_ns() // 1000 - att.since_us) / 1e6
        # (a tracked message's outcome carries its result; a cancelled one's is "cancelled")
        msg = att.msg
        tracked = msg is not None and msg.result_ttl_s or att.cancelled
        att.outcome = OK if att.error is None and not tracked else self.decider.drawn(att, self.fetcher.name)
        if att.span is not None:  # (tracing on: the span ends with its outcome)
            att.end_span()
        if att.outcome.ok and self._returned == len(self._finished) and self._each_end is None:
            self._returned += 1  # inline: finished in take order, so these are our list's oldest
        self._finished.append(att)
        if self._each_end is not None:
            # The supervisor's stuck-loop clock hears each end now, even when
            # Redis is away and its settle waits.
            self._each_end(False)

    # --- partitions and the blocking fetch -----------------------------------

    def _maybe_rotate(self) -> None:
        """Time to look at the other partitions (ROTATE_EVERY starts per slot in a row
        here), nothing in hand: take from the first other that has a message."""
        in_flight = self.in_flight
        if in_flight.running or in_flight.booked or in_flight.waiting or self.settler.finished or self._fetching is not None:
            return
        self.fetcher.rotate_partitions = False
        self.fetcher.found_empty = False
        self._steal_and_launch()

    def _steal_and_launch(self) -> bool:
        """Fetcher.steal, and start the frame it took; whether it took one."""
        stolen = self.fetcher.steal()
        if stolen is not None:
            self.starter.accept([stolen], self._taking)
        return stolen is not None

    def _maybe_block(self) -> None:
        """A script just found the queue empty: with room, wait on it
        (BLMOVE; with partitions, after a look at the others, at home)."""
        if (self._fetching is not None or self.settler.finished or self.in_flight.waiting
                or not self._room(self._taking())):
            return
        f = self.fetcher
        if f.partitions.many and not self.in_flight.running and not self.in_flight.booked:
            if self._steal_and_launch() or self.identity.lost:
                f.found_empty = False
                return
            f.move(f.partitions.home)
        if self._on_idle is not None and not self.in_flight.running:
            self._on_idle()
        self.settler.flush_ends()
        self._fetching = self.runner.run_blocking(f.block_call())
        if self.runner.inline:
            self._fetch_done()  # it returned: its frame starts now, not a turn later

    def _fetch_done(self) -> None:
        """The blocking fetch returned: start its frame, screened when it must
        be. BrokerError if it failed (a frame it moved is the recovery's)."""
        fetched, self._fetching = self._fetching, None
        assert fetched is not None
        frame, paused = fetched.result()
        self.fetcher.found_empty = False  # a timeout leaves no script's look behind: take.lua looks first
        if frame is None or not self._taking():
            return  # (taken during a stop: it stays in our list, given back free at the end)
        if self.runner.inline and not paused and self.starter.start_fetched(frame):
            return
        if (taken := self.fetcher.fetched(frame, paused)) is not None:
            self.starter.accept([taken], self._taking)

    # --- failures, recovery, identity ------------------------------------------

    def _failed(self, exc: BrokerError) -> Optional[float]:
        """A round trip failed: back off, then recover; or, stopping with outcomes
        Redis has not taken, leave them in our list, where the reclaim finds them."""
        if self._stop and not self.in_flight.running and self.settler.finished:
            log.error("queue %s: consumer %s stops with %d outcome(s) unrecorded (%s); their messages stay in its "
                      "processing list for reclaim", self.name, self.consumer_id, len(self.settler.finished), exc)
            self.settler.finished.clear()
            self._unsettled_left = True
            return None
        return self.recovery.failed(exc)

    def _recover(self) -> float:
        """Once the backoff is over (at once when stopping) and the blocking
        fetch has ended: deal with what our list holds before taking again."""
        left = self.recovery.wait_s()
        if left > 0 and not self._stop:
            return left
        if self._fetching is not None:
            if not self._fetching.done():
                return _TICK_S  # its BLMOVE ends within fetch_block_s; its end wakes us
            try:
                self._fetch_done()
            except BrokerError:
                pass  # its frame, if any, is in our list: found below
        # Not taking, what we found stays in our list: given back free by the stop or the renewal.
        self.starter.accept(self.recovery.recover(self.in_flight.frames(), self._taking()), self._taking)
        return 0.0

    def _at_rest(self) -> Optional[float]:
        """Nothing in hand and nothing more to take: done; unless declared
        dead, then stop (``on_lost="stop"``) or go on under a new id."""
        if not self.identity.lost or self._stop:
            return None
        self.registration.declared_dead()
        if self._on_lost == "stop" or not self.registration.renew():
            self._stop = True
            return None
        self.in_flight.forget_booked()  # taken under the old id: given back free with its list
        return 0.0
