"""Where and when a consumer takes its next messages: its current partition,
the queue's paused flag and rate limit as the scripts last said them, and
the take, blocking fetch and screen calls."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Optional

from smqsup import defaults, framing
from smqsup.config.model import Config, QueueConfig
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.worker.consumer_state import ConsumerStats, Identity
from smqsup.worker.partitions import Partitions

log = logging.getLogger(__name__)

#: A frame taken, with the µs its start waits for (rate limit; 0: now).
Taken = tuple[bytes, int]


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


class Fetcher:
    """The fetch side of one consumer. Every call goes to the current
    partition, ``name`` (the queue itself without partitions); it changes
    only with nothing in hand, so an ack always goes where its message came
    from.

    Blocking (BLMOVE) is safe only right after a script looked for work and
    found none (``found_empty``): that script also checked the registration, the
    priority set and the paused flag (includes/ready.lua). Otherwise (after a
    fetch timeout, a reconnect, while paused, after a rate limit's wait)
    take.lua looks first."""

    def __init__(self, broker: Broker, queue: QueueConfig, identity: Identity, stats: ConsumerStats,
                 fetch_block_s: float) -> None:
        self.broker = broker
        self.queue = queue
        self.identity = identity
        self.stats = stats
        self.fetch_block_s = fetch_block_s
        self.partitions = Partitions(queue.name, queue.partitions)
        self.name = queue.name
        self.keys = broker.keys(self.name)  # the current partition's
        #: The queue's rate limit (its share per partition is the scripts').
        self.rate: scripts.Rate = (*queue.rate, len(self.partitions.names), *queue.group_limits)
        self.limited = queue.rate_limit_per_s > 0
        self.paused = False  # the current partition's flag, as the last script said it
        self.found_empty = False  # a script just found the queue empty: a BLMOVE may follow
        self.rotate_partitions = False  # look at the other partitions before the current one
        self.rate_retry_at = 0.0  # monotonic: ask a rate limit that allowed no start again (0: no wait)
        self.poll_at = 0.0  # monotonic: the paused queue's next look

    # --- what the scripts said ---------------------------------------------

    def note_paused(self, paused: bool) -> None:
        """Follow the queue's paused flag, saying each change once; paused,
        look again every PAUSED_POLL_S."""
        if paused != self.paused:
            log.info("queue %s: consumer %s %s", self.name, self.identity.consumer_id,
                     "waits: the queue is paused" if paused else "goes on: the queue was resumed")
            self.paused = paused
            if paused:
                self.poll_at = time.monotonic() + defaults.PAUSED_POLL_S

    def poll_due(self, now: float) -> bool:
        """Paused, and time for the periodic look (take.lua sees a resume);
        the next is then PAUSED_POLL_S away."""
        if not self.paused or now < self.poll_at:
            return False
        self.poll_at = now + defaults.PAUSED_POLL_S
        self.found_empty = False
        return True

    def no_start(self, wait_us: int) -> None:
        """The rate limit allowed no start now: look again then (at most
        RATE_LOOK_MAX_S), and at the other partitions first, whose share
        may allow one."""
        self.rate_retry_at = look_again_at(wait_us)
        self.rotate_partitions = self.rotate_partitions or self.partitions.many

    def look_due(self, now: float) -> bool:
        """A rate limit's wait is over: take.lua may look again."""
        if not self.rate_retry_at or now < self.rate_retry_at:
            return False
        self.rate_retry_at = 0.0
        self.found_empty = False
        return True

    # --- partitions ----------------------------------------------------------

    def repartition(self, count: int) -> None:
        """Another host declared ``count`` partitions: work with those."""
        if count != len(self.partitions.names):
            self.partitions = Partitions(self.queue.name, count)
            self.rate = (*self.queue.rate, count, *self.queue.group_limits)

    def move(self, name: str) -> None:
        """Work on partition ``name`` from now on (nothing in hand)."""
        if name != self.name:
            self.name = name
            self.keys = self.broker.keys(name)
            self.paused = False  # that partition's flag: the next script says
        self.partitions.move(name)

    def steal(self) -> Optional[Taken]:
        """Take one frame from the first other partition that has one (not
        paused, its rate limit allowing a start) and move there; None if
        none had one, or we were declared dead there."""
        for name in self.partitions.others():
            took = self.broker.messages.take(name, self.identity.consumer_id, 1, self.rate)
            if not took.registered:
                self.move(name)  # declared dead there: renew our identity
                self.identity.lost = True
                return None
            if took.frames and not took.paused:
                self.move(name)
                return took.frames[0], took.waits_us[0]
        return None

    def return_elsewhere(self) -> None:
        """Give back, free, what our lists in the other partitions hold: only
        a take whose reply was lost can leave a frame there (we change
        partition with nothing in hand), never handed to a handler."""
        for name in self.partitions.others():
            self.broker.messages.return_held(name, self.identity.consumer_id, reason="taken while the connection broke")

    # --- the blocking fetch and the screen ---------------------------------

    def block_call(self) -> Callable[[], tuple[Optional[bytes], bool]]:
        """The blocking fetch (BLMOVE) on the current partition, its
        arguments fixed now: the runner may run it on another thread."""
        name, consumer_id, block_s = self.name, self.identity.consumer_id, self.fetch_block_s
        return lambda: self.broker.messages.fetch(name, consumer_id, block_s)

    def fetched(self, frame: bytes, paused: bool) -> Optional[Taken]:
        """A frame the blocking fetch took, screened when it must be (the
        queue turned out paused, the frame carries an expiry, the queue has
        a rate limit, it is tracked); None if it is not to be handled."""
        if paused or self.limited or framing.must_screen(frame):
            return self.screen(frame)
        return frame, 0

    def screen(self, frame: bytes) -> Optional[Taken]:
        """The frame, its start booked, if it is to be handled (for a
        group's ticket: the group's frame it was redeemed for); else None:
        given back to a paused or rate-limited queue, expired
        (dead-lettered), a ticket whose group had nothing to give, or
        reclaimed meanwhile."""
        verdict, wait_us, redeemed = self.broker.messages.screen(self.name, self.identity.consumer_id, frame,
                                                                 self.rate)
        if verdict == scripts.HANDLE:
            return redeemed or frame, wait_us
        if verdict == scripts.RATE_LIMITED or (verdict == scripts.NO_TURN and wait_us):
            self.no_start(wait_us)
        elif verdict == scripts.GIVEN_BACK:
            self.note_paused(True)
        elif verdict == scripts.EXPIRED:
            self.stats.expired += 1
            log.info("queue %s: message %s expired before a handler took it; dead-lettered",
                     self.name, framing.peek_id(frame))
        return None
