"""Many messages at once in one consumer process (``concurrency: N``).

    event loop (the main thread)
      one round trip ─▶ ack.lua / nack.lua for each finished message, each
                        folding the fetch of its successor; take.lua for the
                        room left while the queue had work
      a message     ─▶ a task (async def handler) or one of N threads (def)
      nothing to do ─▶ a blocking fetch (BLMOVE) on the fetch thread, while
                        the loop waits for it, a handler or a stop

The RedisSMQ guarantees are those of the sequential Consumer: every message
in flight sits in this consumer's own processing list from its fetch to its
ack or nack (LREM by its exact bytes), so a SIGKILL returns every one of them
(each costing an attempt), and a late ack is a counted no-op. A stop (or
``max_messages``, or an identity declared dead) takes nothing more and lets
every message in flight finish; the supervisor's shutdown_timeout bounds it.

Blocking: the queue is waited on (BLMOVE) only after a script found it empty
(and checked the registration, the priority set and the paused flag, as
includes/ready.lua requires), and never while a batch of settles is due. A
busy queue costs one round trip per batch of finished messages; an empty one
costs one BLMOVE per ``fetch_block_s`` and no polling.

message_timeout: past it, a message costs an attempt at once (reason
"timeout") and frees its slot: an async task is cancelled; a thread cannot
be, so it is left to finish alone (anything it returns later is ignored) and
a fresh thread takes its place; once ``concurrency`` threads are stuck at
once the consumer takes nothing more and ends, to be replaced. A loop that
cannot run its timers (a handler blocking it) is killed by the supervisor
(``decide.kill_after_s``): then every message in flight costs an attempt.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import logging
import time
from typing import Any, Optional

from smqsup import defaults, message, safe
from smqsup.config.model import QueueConfig
from smqsup.errors import BrokerError
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.worker.consumer import BusyHook, Consumer, Handler, IdleHook, Outcome, refuse_generator
from smqsup.worker.partitions import ROTATE_EVERY
from smqsup.worker.runners import Flight, HandlerThreads, awaited, is_async_handler, monotonic_us

log = logging.getLogger(__name__)

_OK = Outcome(True)


#: Longest the loop waits without looking at its flags (a stop requested by
#: a signal handler that could not wake it, a heartbeat's lost identity).
_TICK_S = 1.0


class ConcurrentConsumer(Consumer):
    """Consumes one queue running up to ``queue.concurrency`` messages at
    once; the same contract as Consumer (``run()``, ``request_stop()``,
    ``identity_lost()``, ``stats``)."""

    def __init__(self, broker: Broker, queue: QueueConfig, handler: Handler, *,
                 consumer_id: Optional[str] = None, fetch_block_s: float = defaults.FETCH_BLOCK_S,
                 on_busy: Optional[BusyHook] = None, on_idle: Optional[IdleHook] = None, on_lost: str = "renew",
                 unregister_on_stop: bool = True) -> None:
        super().__init__(broker, queue, handler, consumer_id=consumer_id, fetch_block_s=fetch_block_s,
                         on_busy=on_busy, on_idle=on_idle, on_lost=on_lost, unregister_on_stop=unregister_on_stop)
        self._size = queue.concurrency
        self._async = is_async_handler(handler)
        self._flights: dict[int, Flight] = {}  # by id(); in start order, the oldest first
        self._finished: list[Flight] = []  # outcomes not yet recorded in Redis
        self._fetching: Optional[asyncio.Future[tuple[Optional[bytes], bool]]] = None
        self._checked = False  # the last fetch script found nothing: a BLMOVE may follow
        self._waiter: Optional[asyncio.Future[None]] = None  # what _wait awaits; set by _wake
        self._threads: Optional[HandlerThreads] = None
        self._landed_q: collections.deque[Flight] = collections.deque()  # ended in handler threads
        self._poked = False  # a drain of _landed_q is scheduled in the loop
        self._stuck = 0  # threads abandoned past message_timeout
        self._fetcher: Optional[concurrent.futures.ThreadPoolExecutor] = None  # runs the blocking fetch
        self._unsettled_left = False  # stopped with outcomes Redis never took: leave the list for reclaim
        self._booked = 0  # frames taken whose start the rate limit booked for later (timers pending)
        self._booked_frames: collections.Counter[bytes] = collections.Counter()  # those frames

    # --- what the supervisor and the heartbeats read -------------------------

    @property
    def concurrency(self) -> int:
        return self._size

    @property
    def busy(self) -> bool:
        return bool(self._flights)

    def flight(self) -> tuple[int, int]:
        flights = self._flights
        try:
            oldest = next(iter(flights.values()), None)
        except RuntimeError:  # changed under a reader in another thread (the standalone heartbeat)
            return len(flights), 0
        return (0, 0) if oldest is None else (len(flights), oldest.since_us)

    def request_stop(self) -> None:
        """Take nothing more; let what is in flight finish (signal-safe)."""
        self._stop = True
        self._poke()

    def identity_lost(self, consumer_id: str) -> None:
        super().identity_lost(consumer_id)
        self._poke()

    def _poke(self) -> None:
        """Wake the loop from a signal handler or another thread."""
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop is closed: nothing to wake
                pass

    def _wake(self) -> None:
        """End the current _wait (in the loop)."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- main loop -----------------------------------------------------------

    def run(self) -> str:
        self.start()
        loop = self._event_loop()
        if not self._async:
            self._threads = HandlerThreads(self._size, f"smqsup-{self.name}", self._run_thread)
        try:
            loop.run_until_complete(self._run())
        finally:
            if self._threads is not None:
                self._threads.close()
            if self._fetcher is not None:
                self._fetcher.shutdown(wait=False)
        if self._unsettled_left:  # (logged): nothing is given back, the reclaim decides
            loop.close()
            self._loop = None
        else:
            self._finish()
        if self._lost and self._on_lost == "stop":
            return "declared dead"
        return "max_messages" if self._limit_reached() and not self._stop else "stopped"

    def _taking(self) -> bool:
        return not (self._stop or self._lost or self._limit_reached() or self._stuck >= self._size)

    async def _run(self) -> None:
        backoff = defaults.RECONNECT_BACKOFF_MIN_S
        while True:
            try:
                if not (self._taking() or self._flights or self._finished or self._fetching is not None):
                    if not self._lost or self._stop:
                        return
                    self._renew_identity()  # nothing in hand any more: stop, or go on under a new id
                    continue
                if self._recover_needed:
                    if self._fetching is not None:
                        await asyncio.wait([self._fetching])  # its BLMOVE ends within fetch_block_s
                    self._recover_flights()
                    continue
                self._launch_all(self._exchange())
                backoff = defaults.RECONNECT_BACKOFF_MIN_S  # (only a round trip that worked resets it)
                self._maybe_rotate()
                self._maybe_block()
                await self._wait()
            except BrokerError as exc:
                self._recover_needed = True
                self._checked = False
                if self._stop and not self._flights:
                    # Stopping with outcomes Redis has not taken: they stay in
                    # our list, where the reclaim finds them (as the sequential
                    # consumer leaves its one unsettled message).
                    log.error("queue %s: consumer %s stops with %d outcome(s) unrecorded (%s); their messages "
                              "stay in its processing list for reclaim", self.name, self.consumer_id,
                              len(self._finished), exc)
                    self._finished.clear()
                    self._unsettled_left = True
                    return
                log.warning("queue %s: consumer %s: %s; retrying in %.2fs",
                            self.name, self.consumer_id, exc, backoff)
                await self._sleep(backoff)
                backoff = min(backoff * 2, defaults.RECONNECT_BACKOFF_MAX_S)

    def _room(self) -> int:
        """Messages we may take now."""
        if not self._taking() or self._rotate:
            return 0
        held = self._booked + (1 if self._fetching is not None else 0)
        room = self._size - len(self._flights) - held
        limit = self.queue.max_messages
        if limit:
            room = min(room, limit - self.stats.received - held)
        return max(room, 0)

    def _exchange(self, poll: bool = False) -> list[tuple[bytes, int]]:
        """Record every finished outcome and take what there is room for, in
        one round trip; the frames taken, each with the µs its start waits
        for (rate limit). ``poll``: the paused queue's periodic look (take.lua
        sees a resume)."""
        room = self._room()
        paused = self._paused
        calls: list[scripts.Call[Any]] = []
        fetches: list[bool] = []
        keys, cid = self.broker.keys(self.name), self.consumer_id
        for fl in self._finished:
            fetch = room > 0 and not paused
            room -= fetch
            fetches.append(fetch)
            calls.append(self._settle_call(keys, cid, fl, fetch))
        # Fill the rest while the queue had work (the last fetch came back
        # full), or when no script has looked since the last blocking fetch;
        # while paused, only as the paused poll (_wait) asks.
        take = room if room > 0 and not self._checked and (poll or not paused) and not self._look_at else 0
        if take:
            calls.append(scripts.take(keys, cid, take, self._rate))
        if not calls:
            return []
        results = self.broker.messages.exchange(self.name, calls)
        return self._read_round(results, fetches, bool(take))

    def _settle_call(self, keys: Any, cid: str, fl: Flight, fetch: bool) -> scripts.Call[Any]:
        outcome = fl.outcome
        assert outcome is not None
        if outcome.ok:
            return scripts.ack(keys, cid, fl.frame, fetch, self.broker.stats, self._rate)
        return scripts.nack(keys, cid, fl.frame, retry_threshold=outcome.threshold, delay_ms=outcome.delay_ms,
                            meta=outcome.meta, fetch_next=fetch, dead_event=outcome.dead_event, rate=self._rate)

    def _read_round(self, results: list[Any], fetches: list[bool], took: bool) -> list[tuple[bytes, int]]:
        """Count and note what the scripts said; the frames they took."""
        frames: list[tuple[bytes, int]] = []
        limited = 0  # µs before the rate limit allows a start, when it allowed none
        settled, self._finished = self._finished, []
        looked = False  # a script looked for work (checked registration, priorities, paused)
        empty = False
        for fl, fetched, result in zip(settled, fetches, results):
            if isinstance(result, scripts.AckResult):
                if result.acked:
                    self.stats.acked += 1
                else:
                    self._late(fl.frame)
            elif result.outcome == scripts.LATE:
                self._late(fl.frame)
            elif result.outcome == scripts.DEAD:
                self.stats.dead_lettered += 1
            else:
                self.stats.retried += 1
            if not result.registered:
                self._lost = True
            self._note_paused(result.paused)
            if result.next_frame is not None:
                frames.append((result.next_frame, result.wait_us))
            elif fetched and result.wait_us:
                limited = result.wait_us
            if fetched:
                looked = True
                empty = result.next_frame is None and not result.wait_us
        if took:
            take: scripts.TakeResult = results[-1]
            if not take.registered:
                self._lost = True
            self._note_paused(take.paused)
            frames.extend(zip(take.frames, take.waits_us))
            limited = limited or take.retry_us
            looked = True
            empty = not take.frames and not take.retry_us
        if limited:
            self._no_start(limited)  # the queue has work: no BLMOVE; the other partitions once all landed
        if looked:
            # Only a script that looked for work and found none makes a BLMOVE
            # safe next (includes/ready.lua); one that found work says the
            # queue may have more, so the next round takes again.
            self._checked = empty and not self._lost and not self._paused
        self._report()
        return frames

    # --- starting and finishing messages -------------------------------------

    def _launch_all(self, frames: list[tuple[bytes, int]]) -> None:
        """Start each frame, now or at the start its rate limit booked."""
        loop = self._loop
        assert loop is not None
        for frame, wait_us in frames:
            if wait_us:
                self._booked += 1
                self._booked_frames[frame] += 1
                loop.call_later(wait_us / 1e6, self._start_booked, frame)
            else:
                self._launch(frame)

    def _launch_screened(self, frame: bytes) -> None:
        """Start a frame ``_screen`` let through, at the start it booked."""
        hold, self._hold_us = self._hold_us, 0
        self._launch_all([(frame, hold)])

    def _start_booked(self, frame: bytes) -> None:
        """A booked start is due (in the loop). During a stop the frame is
        left in our list: given back free at the end, never handled."""
        self._booked -= 1
        self._booked_frames[frame] -= 1
        if self._taking():
            self._launch(frame)
        self._wake()

    def _launch(self, frame: bytes) -> None:
        """Start a frame just taken: its handler runs as a task or in a thread."""
        self.stats.received += 1
        if self.partitions.handled(ROTATE_EVERY * self._size):
            self._rotate = True  # take nothing more here; _maybe_rotate looks elsewhere once all have landed
        msg = self._decode(frame)
        if isinstance(msg, Outcome):  # malformed: dead-lettered without a handler
            self._finished.append(Flight(frame, None, 0, 0.0, outcome=msg))
            return
        fl = Flight(frame, msg, monotonic_us(), time.perf_counter())
        self._flights[id(fl)] = fl
        loop = self._loop
        assert loop is not None
        if self._async:
            fl.task = loop.create_task(self._run_task(fl))
        else:
            assert self._threads is not None
            self._threads.run(fl)
        timeout_s = self.queue.message_timeout_s
        if timeout_s:
            fl.timer = loop.call_later(timeout_s, self._time_out, fl)
        if self._on_busy is not None:
            self._on_busy(msg)

    async def _run_task(self, fl: Flight) -> None:
        """An async handler's task: runs it, then lands its outcome (in the
        task itself: no callback, no extra turn of the loop per message)."""
        assert fl.msg is not None
        try:
            result = self.handler(fl.msg)
            if result is not None:
                if inspect.isawaitable(result):
                    await result
                else:
                    refuse_generator(result)
        except BaseException as exc:  # noqa: BLE001 - judged by _landed (a CancelledError included)
            fl.error = exc
        self._landed(fl)

    def _run_thread(self, fl: Flight) -> None:
        """A plain handler, in a handler thread; its end is handed to the loop
        in batches (one wake-up of the loop for all that ended meanwhile)."""
        loop = self._loop  # this run's loop: closed (never None'd here) if we outlive it
        assert fl.msg is not None and loop is not None
        try:
            result = self.handler(fl.msg)
            if result is None:
                pass
            elif inspect.isawaitable(result):  # a plain def returning a coroutine: it runs on the loop
                asyncio.run_coroutine_threadsafe(awaited(result), loop).result()
            else:
                refuse_generator(result)
        except BaseException as exc:  # noqa: BLE001 - judged by _landed, in the loop
            fl.error = exc
        self._landed_q.append(fl)
        if not self._poked:
            # A race here costs one wake-up too many, never one too few: the
            # drain clears the flag before it empties the deque.
            self._poked = True
            try:
                loop.call_soon_threadsafe(self._drain_threads)
            except RuntimeError:  # the loop is closed: a thread abandoned past message_timeout ended late
                pass

    def _drain_threads(self) -> None:
        self._poked = False
        while self._landed_q:
            self._landed(self._landed_q.popleft())

    def _landed(self, fl: Flight) -> None:
        """A handler is done (in the loop): its outcome is due."""
        exc = fl.error
        if self._flights.pop(id(fl), None) is None:
            # Settled at its message_timeout already: what it did since is
            # ignored. A thread that was stuck is free again.
            if fl.task is None:
                self._stuck -= 1
            return
        if fl.timer is not None:
            fl.timer.cancel()
        self.stats.busy_s += time.perf_counter() - fl.started
        assert fl.msg is not None
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            raise exc  # as in the sequential loop: the process ends, its list is reclaimed
        if exc is None:
            fl.outcome = _OK
        elif isinstance(exc, Exception):
            fl.outcome = self._judged(fl.msg, exc)  # Reject, Retry, or a failure; never raises
        else:
            # A CancelledError none of our timeouts caused (the handler awaited
            # something cancelled), GeneratorExit...: a failed attempt.
            text = safe.escape(exc, 500)  # (never raises, whatever its __str__ does)
            fl.outcome = self._judged(fl.msg, RuntimeError(f"the handler raised {type(exc).__name__}: {text}"))
        self._finished.append(fl)
        self._report()
        self._wake()

    def _time_out(self, fl: Flight) -> None:
        """message_timeout passed for ``fl`` (called in the loop): its message
        costs an attempt now, whatever its handler does after. A task is
        cancelled; a thread cannot be, so it is left to finish alone and
        another takes its place (until ``concurrency`` are stuck at once)."""
        if self._flights.pop(id(fl), None) is None:
            return
        fl.timed_out = True
        assert fl.msg is not None
        log.warning("queue %s: message %s ran past message_timeout %gs; %s", self.name, fl.msg.id,
                    self.queue.message_timeout_s,
                    "cancelling it" if fl.task is not None else "its thread is left behind")
        self.stats.busy_s += time.perf_counter() - fl.started
        fl.outcome = self._timeout_outcome(fl.msg)
        self._finished.append(fl)
        if fl.task is not None:
            fl.task.cancel()
        else:
            assert self._threads is not None
            self._stuck += 1
            if self._stuck >= self._size:
                log.error("queue %s: consumer %s has %d handler threads stuck past message_timeout; it takes "
                          "nothing more and ends once the others finish", self.name, self.consumer_id,
                          self._stuck)
            else:
                self._threads.replace_one()
        self._report()
        self._wake()

    def _timeout_outcome(self, msg: message.Message) -> Outcome:
        """A message past message_timeout: a failed attempt, reason "timeout"."""
        text = f"message_timeout {self.queue.message_timeout_s:g}s passed"
        failed = self._failure(msg, TimeoutError(text))
        meta = scripts.meta_json("timeout", error_type="TimeoutError", error=text, message_id=msg.id,
                                 consumer=self.consumer_id)
        return Outcome(False, meta, threshold=failed.threshold, delay_ms=failed.delay_ms)

    def _report(self) -> None:
        if self._on_busy is not None:
            self._on_busy(None)

    # --- waiting -------------------------------------------------------------

    def _maybe_rotate(self) -> None:
        """Time to look at the other partitions (partitions.ROTATE_EVERY
        starts per slot in a row here) and nothing in hand any more: take
        from the first other that has a message, and work there."""
        if not self._rotate or self._flights or self._booked or self._finished or self._fetching is not None:
            return
        self._rotate = False
        self._checked = False
        self._steal_and_launch()

    def _steal_and_launch(self) -> bool:
        """Consumer._steal, and start the frame it took at its booked start;
        whether it took one."""
        stolen = self._steal()
        if stolen is not None:
            self._launch_screened(stolen)
        return stolen is not None

    def _maybe_block(self) -> None:
        """Start the blocking fetch when a script just found the queue empty
        and there is room: the fetch thread waits on the queue for us."""
        if self._fetching is not None or not self._checked or self._finished or self._room() <= 0:
            return
        if self.partitions.many and not self._flights and not self._booked:
            # Nothing in hand: the other partitions first, then home to block.
            if self._steal_and_launch() or self._lost:
                self._checked = False
                return
            self._move(self.partitions.home)
        if self._on_idle is not None and not self._flights:
            self._on_idle()
        loop = self._loop
        assert loop is not None
        if self._fetcher is None:
            self._fetcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"smqsup-fetch-{self.name}")
        self._fetching = loop.run_in_executor(self._fetcher, self.broker.messages.fetch, self.name, self.consumer_id,
                                              self._fetch_block_s)
        self._fetching.add_done_callback(lambda _f: self._wake())

    async def _wait(self) -> None:
        """Until a handler finishes, the blocking fetch returns, a stop or a
        lost identity is told, or (paused) the next look at the flag."""
        if self._fetch_done():
            return
        look_in = self._look_at - time.monotonic() if self._look_at else 0.0
        if self._look_at and look_in <= 0:
            self._look_at = 0.0  # the rate limit allows a start now: take.lua looks
            self._checked = False
        if self._finished or (self._room() > 0 and not self._checked and self._fetching is None
                              and not self._paused and not self._look_at):
            return  # something to do now
        polling = self._paused and self._taking()
        longest = defaults.PAUSED_POLL_S if polling else _TICK_S
        await self._sleep(min(longest, look_in) if self._look_at else longest)
        if polling and not self._finished and self._fetching is None:
            self._checked = False
            self._launch_all(self._exchange(poll=True))
        self._fetch_done()

    def _fetch_done(self) -> bool:
        """If the blocking fetch has returned, take its frame (True)."""
        fetched = self._fetching
        if fetched is None or not fetched.done():
            return False
        self._fetching = None
        self._fetched(fetched)
        return True

    def _fetched(self, fetched: "asyncio.Future[tuple[Optional[bytes], bool]]") -> None:
        """The blocking fetch returned: its frame, screened as the sequential
        loop screens one (paused, expiring), starts."""
        try:
            frame, paused = fetched.result()
        except BrokerError:
            self._recover_needed = True  # its BLMOVE may have moved a frame whose reply was lost
            raise
        # A timeout leaves no script's look behind: take.lua looks first.
        self._checked = False
        if frame is None or not self._taking():
            return  # (taken during a stop: it stays in our list, given back free at the end)
        if paused or self._limited or message.has_expiry(frame):
            taken = self._screen(frame)
            if taken is None:
                return  # (a rate limit that allowed no start set _look_at)
            frame = taken
        self._launch_screened(frame)

    async def _sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds`` (handlers run meanwhile), less on a wake."""
        loop = self._loop
        assert loop is not None
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(seconds, self._wake)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    # --- recovery ------------------------------------------------------------

    def _recover_flights(self) -> None:
        """After a failed round trip: record what was not recorded, handle
        what our list holds that nobody runs (a fetch whose reply was lost)."""
        if self._fetching is not None and not self._fetching.done():
            return  # its BLMOVE times out by itself; recover once it has
        if self._fetching is not None:
            fetched, self._fetching = self._fetching, None
            try:
                self._fetched(fetched)
            except BrokerError:
                pass  # its frame, if any, is in our list: found below
        self.broker.ping()
        self._return_elsewhere()
        held = collections.Counter(self.broker.messages.processing(self.name, self.consumer_id))
        for fl in self._flights.values():
            held[fl.frame] -= 1
        held.subtract(self._booked_frames)  # taken, waiting for their booked start
        unsettled, self._finished = self._finished, []
        registered: Optional[bool] = None
        for fl in unsettled:
            if held[fl.frame] > 0:
                held[fl.frame] -= 1
                self._finished.append(fl)  # not recorded: the next round records it
                continue
            if registered is None:
                registered = self.broker.registry.is_registered(self.name, self.consumer_id)
            if not registered:
                # Reclaimed by the collector while Redis was away from us.
                self.broker.registry.count_late_ack(self.name)
                self._late(fl.frame)
                self._lost = True
            # (Else its settle ran before the connection broke.)
        self._recover_needed = False
        self._checked = False
        if not self._taking():
            return  # found frames stay in our list: given back free by the stop or the renewal
        for frame, count in held.items():
            for _ in range(count):
                taken = self._screen(frame)
                if taken is not None:
                    log.info("queue %s: consumer %s handles message %s found in its list",
                             self.name, self.consumer_id, message.peek_id(taken))
                    self._launch_screened(taken)


def make_consumer(broker: Broker, queue: QueueConfig, handler: Handler, **options: Any) -> Consumer:
    """The consumer ``queue.concurrency`` asks for: the sequential loop for 1,
    ConcurrentConsumer above it."""
    if queue.concurrency > 1:
        return ConcurrentConsumer(broker, queue, handler, **options)
    return Consumer(broker, queue, handler, **options)
