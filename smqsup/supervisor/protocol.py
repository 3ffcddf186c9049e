"""The contract between the supervisor parent and its consumer children:
reserved exit statuses, and the shared-memory slot each child writes.

A slot is written only by its child and read only by the parent, so no lock
is needed: each field is one aligned 8-byte integer, which x86-64 and arm64
store and load whole.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from typing import NamedTuple

#: Child exit statuses the parent reads as "do not restart in a loop".
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_IMPORT = 3  # the handler cannot be imported: the queue goes FATAL
EXIT_REDIS = 4  # Redis unreachable at boot: backoff, then FATAL if it persists

_FIELDS = struct.Struct("<qqqqqqqqqqq")  # see SlotView, in order
_COUNTERS = struct.Struct("<qqqqqq")  # received .. busy_us
_FLIGHT = struct.Struct("<qq")  # busy_since_us, received
_STARTED = struct.Struct("<qqq")  # in_flight, started, returned
SLOT_BYTES = 128  # two cache lines per slot: children never share a line


class SlotView(NamedTuple):
    """What a child has told its parent (0: not yet / idle)."""

    ready_us: int  # monotonic µs when it became ready
    busy_since_us: int  # monotonic µs when its oldest message in flight started; 0 idle
    received: int
    acked: int
    retried: int
    dead_lettered: int
    late_acks: int
    busy_us: int  # total time in the handler
    in_flight: int = 0  # messages its handlers are running now (up to the queue's concurrency)
    #: Frames in its list it has started (running, or ended and not yet
    #: settled): never fewer than there are, so that a reclaim after its
    #: death charges an attempt to each of them (and frees only what it
    #: took and never started: its prefetched frames).
    started: int = 0
    #: Of those, the oldest whose handler returned, in a row (a consumer at
    #: concurrency 1 only; 0 otherwise): a reclaim returns them free, since
    #: their handlers ran to the end (handled again: duplicates, not failures),
    #: so that a message beside a poison one is not charged for its kills.
    returned: int = 0


MAX_SLOTS = 4096


def signal_child(pid: int, sig: int) -> None:
    """Send ``sig`` to a child; one already dead is left to the next reap."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def monotonic_us() -> int:
    """CLOCK_MONOTONIC in µs: the same clock in the parent and every child."""
    return time.monotonic_ns() // 1000


class Slots:
    """An anonymous shared mapping made by the parent before it forks; every
    child inherits it and writes only its own slot."""

    def __init__(self, count: int = MAX_SLOTS) -> None:
        self._map = mmap.mmap(-1, count * SLOT_BYTES)  # MAP_SHARED | MAP_ANONYMOUS
        self._free = list(range(count - 1, -1, -1))

    # --- parent side ------------------------------------------------------

    def allocate(self) -> int:
        """A zeroed slot index for a new child (IndexError when all are used)."""
        index = self._free.pop()
        _FIELDS.pack_into(self._map, index * SLOT_BYTES, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        return index

    def release(self, index: int) -> None:
        self._free.append(index)

    def read(self, index: int) -> SlotView:
        return SlotView(*_FIELDS.unpack_from(self._map, index * SLOT_BYTES))

    # --- child side -------------------------------------------------------

    def set_ready(self, index: int) -> None:
        struct.pack_into("<q", self._map, index * SLOT_BYTES, monotonic_us())

    def set_busy(self, index: int, received: int, in_flight: int = 1, since_us: int = 0, started: int = 1,
                 returned: int = 0) -> None:
        """Mark a message about to start (and count it): ``in_flight`` now
        run, the oldest of them since ``since_us`` (0: now, the one just
        started), ``started`` frames started and not settled, the oldest
        ``returned`` of them ended by their handler returning. Written before
        its handler (or even its decoding) begins."""
        base = index * SLOT_BYTES
        _STARTED.pack_into(self._map, base + 64, in_flight, started, returned)
        _FLIGHT.pack_into(self._map, base + 8, since_us or monotonic_us(), received)

    def set_idle(self, index: int, received: int, acked: int, retried: int, dead_lettered: int, late_acks: int,
                 busy_us: int, in_flight: int = 0, since_us: int = 0, started: int = 0, returned: int = 0) -> None:
        """Mark messages settled and publish the counters: ``in_flight``
        still run, the oldest since ``since_us`` (0 when none is),
        ``started`` frames started and not settled. Written after Redis
        took the settles, so ``started`` is never below the truth."""
        base = index * SLOT_BYTES
        _COUNTERS.pack_into(self._map, base + 16, received, acked, retried, dead_lettered, late_acks, busy_us)
        _STARTED.pack_into(self._map, base + 64, in_flight, started, returned)
        struct.pack_into("<q", self._map, base + 8, since_us if in_flight else 0)
