"""The messages a consumer holds in its list and has not finished: the attempts
running, with their message_timeout deadlines, the frames booked for a later
start by the rate limit, and the frames prefetched, waiting for a free slot."""

from __future__ import annotations

import collections
import heapq
import itertools
import time
from collections.abc import Iterator
from typing import Optional

from smqsup import message
from smqsup.worker.consumer_state import Attempt


def monotonic_us() -> int:
    """CLOCK_MONOTONIC in µs: the clock the supervisor's slot reader uses."""
    return time.monotonic_ns() // 1000


class InFlight:
    """Running attempts in start order (the oldest first: also the first
    deadline, all sharing one timeout; ``running`` is an ordered set, each
    attempt a key) and booked frames by start time.
    ``timeout_us`` 0: no deadline (message_timeout unset, or not this
    consumer's to enforce). Read from other threads: ``flight``, ``busy``."""

    def __init__(self, timeout_us: int) -> None:
        self.timeout_us = timeout_us
        self.running: dict[Attempt, None] = {}
        self.booked: list[tuple[float, int, bytes]] = []  # a heap: (monotonic start, seq, frame)
        #: Prefetched frames, in the order they were taken (and are started).
        #: Never started, they sit at our list's newest end, beyond every
        #: started one (starts follow the take order): a reclaim frees them.
        self.waiting: collections.deque[bytes] = collections.deque()
        self._seq = itertools.count()

    @property
    def deadlines(self) -> bool:
        """Whether an attempt running has a deadline (the first may be due)."""
        return bool(self.timeout_us and self.running)

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def flight(self) -> tuple[int, int]:
        """(attempts running, monotonic µs since the oldest started; (0, 0): none)."""
        running = self.running
        try:
            oldest = next(iter(running), None)
        except RuntimeError:  # changed under a reader in another thread (the standalone heartbeat)
            return len(running), 0
        return (0, 0) if oldest is None else (len(running), oldest.since_us)

    def start(self, frame: bytes, msg: message.Message) -> Attempt:
        """A new running attempt, its clocks started now."""
        att = Attempt(frame, msg, time.monotonic_ns() // 1000)
        self.running[att] = None
        return att

    def overdue(self) -> Iterator[Attempt]:
        """Take out, one by one, the attempts past their deadline."""
        if not self.deadlines:
            return
        since_us = monotonic_us() - self.timeout_us  # started before: overdue
        while self.running:
            att = next(iter(self.running))
            if att.since_us > since_us:
                return
            del self.running[att]
            yield att

    def book(self, frame: bytes, wait_us: int) -> None:
        heapq.heappush(self.booked, (time.monotonic() + wait_us / 1e6, next(self._seq), frame))

    def due(self) -> Iterator[bytes]:
        """Take out, one by one, the booked frames whose start has come."""
        now = time.monotonic()
        while self.booked and self.booked[0][0] <= now:
            yield heapq.heappop(self.booked)[2]

    def forget_booked(self) -> None:
        """Drop the bookings and the waiting frames (their frames go back free
        with the list they are in)."""
        self.booked.clear()
        self.waiting.clear()

    def give_back(self) -> list[bytes]:
        """Take out every waiting frame, in the order they were taken."""
        frames = list(self.waiting)
        self.waiting.clear()
        return frames

    def next_due(self) -> Optional[float]:
        """When (monotonic) the first booked start or deadline comes; None: none."""
        due = self.booked[0][0] if self.booked else None
        if self.timeout_us and self.running:
            deadline = (next(iter(self.running)).since_us + self.timeout_us) / 1e6
            due = deadline if due is None else min(due, deadline)
        return due

    def frames(self) -> list[bytes]:
        """Every frame held: running, booked or waiting (they stay ours in a recovery)."""
        return [att.frame for att in self.running] + [frame for _, _, frame in self.booked] + list(self.waiting)
