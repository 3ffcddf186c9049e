"""Messages a consumer stops before their handlers end: past message_timeout,
or cancelled (Producer.cancel). Both cost what they cost without the handler:
an attempt for a timeout, the dead letters ("cancelled", never retried) for a
cancel. A task is cancelled at once; a thread cannot be: it is told (its
message's ``cancelled`` Event) and, if it goes on, left behind at
message_timeout; an inline handler (one at a time) is the supervisor's to
stop, by replacing the process (supervisor/beats.py)."""

from __future__ import annotations

import logging
import time
from typing import Optional

from smqsup import framing
from smqsup.store.broker import Broker
from smqsup.worker.consumer_state import Attempt, BusyHook, ConsumerStats, Identity
from smqsup.worker.fetching import Fetcher
from smqsup.worker.in_flight import InFlight
from smqsup.worker.outcomes import OutcomeDecider
from smqsup.worker.runners import InlineRunner, LoopRunner
from smqsup.worker.settling import Settler

log = logging.getLogger(__name__)


class Stopper:
    """Stops attempts for a consumer (its parts, shared)."""

    def __init__(self, broker: Broker, identity: Identity, stats: ConsumerStats, fetcher: Fetcher, in_flight: InFlight,
                 settler: Settler, decider: OutcomeDecider, runner: "InlineRunner | LoopRunner",
                 on_busy: Optional[BusyHook]) -> None:
        self.broker, self.identity, self.stats, self.fetcher = broker, identity, stats, fetcher
        self.in_flight, self.settler, self.decider, self.runner, self._on_busy = in_flight, settler, decider, runner, on_busy
        #: A cancel may concern us (SIGUSR2 from the supervisor, or a heartbeat said so): look at the next turn.
        self.cancels_due = False

    def time_out(self, att: Attempt) -> None:
        """message_timeout passed for ``att`` (out of the running ones): its
        message costs an attempt now, whatever its handler does after (a
        cancel asked meanwhile: it is dead-lettered "cancelled" instead)."""
        assert att.msg is not None
        self.stats.busy_s += (time.monotonic_ns() // 1000 - att.since_us) / 1e6
        now = "cancelling it" if att.task is not None else "its thread is left behind"
        name = self.fetcher.name
        att.outcome = self.decider.cancelled(att.msg, name) if att.cancelled else self.decider.timed_out(att.msg, name,
                                                                                                    now)
        self._give_up(att)
        if self.runner.exhausted:
            log.error("queue %s: consumer %s has %d handler threads stuck past message_timeout; it takes nothing "
                      "more and ends once the others finish", name, self.identity.consumer_id, self.runner.size)

    def _give_up(self, att: Attempt) -> None:
        if att.span is not None:
            att.end_span()
        self.settler.finished.append(att)
        self.runner.abandon(att)
        if self._on_busy is not None:
            self._on_busy(False)

    def apply_cancels(self) -> None:
        """Stop what we hold whose cancel was asked: a task now; a thread
        told; a frame not started dead-lettered without running."""
        self.cancels_due = False
        in_flight = self.in_flight
        held = {att.msg.id: att for att in in_flight.running if att.msg is not None}
        waiting = {mid: frame for frame in in_flight.waiting if (mid := framing.peek_id(frame)) is not None}
        asked = self.broker.tracking.cancels_asked(self.fetcher.partitions.names, [*held, *waiting])
        for mid in asked:
            if mid in held:
                self._cancel(held[mid])
            elif (frame := waiting.get(mid)) is not None:
                in_flight.waiting.remove(frame)
                self.settler.finished.append(Attempt(frame, None, outcome=self.decider.cancelled_frame(mid, started=False)))

    def _cancel(self, att: Attempt) -> None:
        assert att.msg is not None
        att.cancelled = True
        att.msg.cancel()
        if att.task is not None and att in self.in_flight.running:  # a task stops now; a thread was told
            del self.in_flight.running[att]
            self.stats.busy_s += (time.monotonic_ns() // 1000 - att.since_us) / 1e6
            att.outcome = self.decider.cancelled(att.msg, self.fetcher.name)
            self._give_up(att)
