"""Starting the frames a consumer took: each one decoded and handed to the
runner in the order it was taken, at once or, prefetched, once a slot is
free; and when the line of waiting frames must stop for a round trip (a
settle or a look at the paused flag is due) or go back (a stop, a pause).

Invariant the supervisor's reclaim rests on (protocol.SlotView.started):
frames start in the order they were taken, so the started ones are always
the oldest of the consumer's list, and the slot counts a frame started
(``on_busy(True)``) before anything of it runs, its decoding included.
"""

from __future__ import annotations

import functools
import operator
import os
import time
from collections.abc import Callable
from typing import Any, Optional

from smqsup import defaults, framing
from smqsup.client.batching import Batch
from smqsup.client.producer import Producer
from smqsup.config.model import QueueConfig
from smqsup.errors import MalformedMessage
from smqsup.message import decode
from smqsup.store.broker import Broker
from smqsup.worker.consumer_state import OK, Attempt, BusyHook, ConsumerStats, Identity
from smqsup.worker.fetching import Fetcher, Taken
from smqsup.worker.in_flight import InFlight
from smqsup.worker.outcomes import OutcomeDecider
from smqsup.worker.partitions import ROTATE_EVERY
from smqsup.worker.runners import InlineRunner, LoopRunner
from smqsup.worker.settling import Settler

#: A Taken's frame and its wait, read in C over a batch.
_FRAME, _WAIT = operator.itemgetter(0), operator.itemgetter(1)


class Starter:
    """Starts frames. ``capacity``: the frames the consumer may hold,
    ``concurrency + prefetch - 1`` (its running ones and the rest waiting in
    ``in_flight.waiting``). ``stopped`` is set by the consumer's stop
    (signal-safe: a flag), after which nothing more starts."""

    def __init__(self, queue: QueueConfig, stats: ConsumerStats, identity: Identity, fetcher: Fetcher, decider: OutcomeDecider,
                 in_flight: InFlight, settler: Settler, runner: "InlineRunner | LoopRunner",
                 on_busy: Optional[BusyHook]) -> None:
        self.stats, self.identity, self.fetcher, self.decider = stats, identity, fetcher, decider
        self.in_flight, self.settler, self.runner, self.on_busy = in_flight, settler, runner, on_busy
        # A rate-limited queue books each start as its frame is taken: a
        # prefetched frame would hold a start it cannot use yet (denied to the
        # other consumers), so such a queue takes only what it can start.
        prefetch = 1 if fetcher.limited else queue.prefetch
        self.prefetching = prefetch > 1
        self.traced = queue.tracing
        self.capacity = runner.size + prefetch - 1
        self.stopped = False
        self._rotate_every = ROTATE_EVERY * runner.size  # starts in a row from one partition
        self._settle_us = int(defaults.SETTLE_WITHIN_S * 1e6)
        self._look_s = defaults.PAUSED_POLL_S / 2  # while frames wait: how often a script says the paused flag
        self._fresh = 0  # waiting frames at the front that the take just screened (ttl, paused)
        self.looked_at = 0.0  # monotonic: when a script (or BLMOVE's flag read) last said the paused flag

    # --- frames taken -----------------------------------------------------------

    def accept(self, frames: list[Taken], taking: Callable[[], bool]) -> None:
        """Frames just taken: start them, book them, or (prefetching) let
        them wait for a free slot, in the order they came."""
        if not self.prefetching:
            for frame, wait_us in frames:
                self.launch(frame, wait_us)
            return
        in_flight = self.in_flight
        waiting = in_flight.waiting
        # Whatever brought them (a script, or BLMOVE and its flag read after
        # the move) said the paused flag just now: no look is due before
        # they start, even after a long wait in BLMOVE.
        self.looked_at = time.monotonic()
        # Those that start now, first in line, were screened by the take that brought them.
        self._fresh = 0 if waiting else min(len(frames), max(0, self.runner.size - len(in_flight.running)))
        if any(map(_WAIT, frames)):
            for frame, wait_us in frames:
                if wait_us:
                    in_flight.book(frame, wait_us)
                else:
                    waiting.append(frame)
        else:  # (no rate limit: no start booked)
            waiting.extend(map(_FRAME, frames))
        if waiting and taking() and not self.fetcher.paused:
            self.start_waiting()

    def start_fetched(self, frame: bytes) -> bool:
        """Inline, the frame the blocking fetch just took, the queue not
        paused (its flag read after the move): started now if it is plain (no
        expiry to screen) and nothing else is in hand or limits its start,
        what accept() would do, without the line of waiting frames; whether
        it was."""
        if framing.must_screen(frame) or self.fetcher.limited or self.in_flight.waiting or self.in_flight.running:
            return False
        self.looked_at = time.monotonic()  # (as accept: the fetch read the flag just now)
        self.launch(frame)
        return True

    def before_exchange(self, taking: bool) -> Optional[list[bytes]]:
        """Before a turn's round trip: start what may start; None if frames
        still wait for a slot and nothing is due (no round trip now); else
        the frames to give back with the round trip (a stop or a pause: all
        that wait, free), maybe none."""
        if not self.in_flight.waiting:
            return []
        if taking and not self.fetcher.paused:
            return None if self.start_waiting() else []
        return self.in_flight.give_back()

    def start_waiting(self) -> bool:
        """Start waiting frames while a slot is free (inline: run them one
        after another) until a settle or a look at the paused flag is due;
        whether frames still wait and nothing is due (no round trip needed).
        A frame that waited and carries an expiry is screened first (by the
        Redis clock: screen.lua dead-letters it "expired")."""
        in_flight, finished, size, f, identity = self.in_flight, self.settler.finished, self.runner.size, \
            self.fetcher, self.identity
        waiting, running, clock, settle_us = in_flight.waiting, in_flight.running, time.monotonic_ns, self._settle_us
        look_ns, inline = int((self.looked_at + self._look_s) * 1e9), self.runner.inline
        while waiting:
            now_ns = clock()
            # Inline, the outcomes drawn are recorded before the next frame
            # starts also when the last one failed (an attempt a reclaim must
            # charge: nothing may end after it unsettled), or when the next
            # was charged an attempt before (attempts prefix not "0": it may
            # be what killed a consumer; were it to kill ours, the messages
            # handled before it would run again with it at each delivery).
            due = (finished and (now_ns // 1000 - finished[0].since_us > settle_us
                                 or (inline and (finished[-1].outcome is not OK or waiting[0][:1] != b"0")))) \
                or now_ns > look_ns
            # A free slot takes its frame first; inline (the slot is this
            # thread) a due settle or look goes first.
            if len(running) >= size or (due and inline):
                return not due
            if self.stopped or identity.lost or f.paused:
                return False
            frame = waiting.popleft()
            if self._fresh:
                self._fresh -= 1
            elif framing.has_expiry(frame) and f.screen(frame) is None:
                continue  # its ttl passed while it waited (or the queue turned out paused): not started
            self.launch(frame)
        return False

    def launch(self, frame: bytes, wait_us: int = 0) -> None:
        """Start a frame now, or book it for the start the rate limit gave it
        (during a stop it then stays in our list, never handled)."""
        if wait_us:
            self.in_flight.book(frame, wait_us)
            return
        self.stats.received += 1
        f = self.fetcher
        if f.partitions.many and f.partitions.handled(self._rotate_every):
            f.rotate_partitions = True  # take nothing more here: the consumer looks elsewhere
        if self.on_busy is not None:
            # Told before the decoding: a frame that kills the process there
            # has started, and its reclaim charges it an attempt.
            self.on_busy(True)
        try:
            msg = decode(frame)  # raises MalformedMessage and nothing else, whatever the bytes
        except MalformedMessage as exc:  # dead-lettered without a handler
            self.settler.finished.append(Attempt(frame, None, outcome=self.decider.malformed(exc, f.name)))
            return
        if msg.result_ttl_s or msg.events_max:  # tracked, or with events: its handler may report progress
            msg.progress_sink = functools.partial(f.broker.tracking.progress, f.name, msg.id,
                                                  tracked=msg.result_ttl_s > 0, events_max=msg.events_max,
                                                  attempts=msg.attempts)
        if msg.linked & framing.LINK_PARENTS:  # a dependency's child: its handler may read its parents
            msg.parents_source = functools.partial(_family, f.broker, f.name, msg.id)
        if msg.linked & framing.LINK_BATCH:  # a batch's member: its handler may add to its batch
            msg.batch_source = functools.partial(_batch_of, f.broker, f.name, msg.id)
        att = self.in_flight.start(frame, msg)
        if self.traced:
            from smqsup import tracing  # (imported only where tracing is on)

            att.span, att.trace = tracing.process(msg, f.name, self.identity.consumer_id)
        self.runner.start(att)

    # --- what is due ------------------------------------------------------------

    def look_due(self, now: float) -> bool:
        """Frames wait, and no script has said the paused flag for a while."""
        return bool(self.in_flight.waiting) and now >= self.looked_at + self._look_s

    def next_due(self) -> Optional[float]:
        """While frames wait: when (monotonic) the next look or settle is due."""
        if not self.in_flight.waiting:
            return None
        due = self.looked_at + self._look_s
        finished = self.settler.finished
        if finished:
            due = min(due, (finished[0].since_us + self._settle_us) / 1e6)
        return due


def _family(broker: Broker, name: str, message_id: str) -> tuple[dict[tuple[str, str], Any], dict[tuple[str, str], str]]:
    """What the parents of ``message_id`` of partition ``name`` became (Message.parents)."""
    parents = broker.workflows.parents(name, message_id)
    return parents.done, parents.failed


#: The Producers of this process's handlers' batch additions (message.batch), made at the first:
#: (pid, url, namespace) -> it.
_PRODUCERS: dict[tuple[int, str, str], Producer] = {}


def _batch_of(broker: Broker, name: str, message_id: str) -> Any:
    """The batch (client/batching.py) ``message_id`` of partition ``name`` is a member of, or None."""
    found = broker.batches.member_of(name, message_id)
    if found is None:
        return None
    key = (os.getpid(), broker.url, broker.namespace)
    producer = _PRODUCERS.get(key)
    if producer is None:
        if any(pid != key[0] for pid, _, _ in _PRODUCERS):
            _PRODUCERS.clear()  # (those made before a fork are not this process's)
        producer = _PRODUCERS[key] = Producer(broker.url, broker.namespace)
    return Batch(producer, *found, owned=False)
