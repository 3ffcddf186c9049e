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

_FIELDS = struct.Struct("<qqqqqqqq")  # see SlotView, in order
_COUNTERS = struct.Struct("<qqqqqq")  # received .. busy_us
SLOT_BYTES = 64  # one cache line per slot: children never share a line


class SlotView(NamedTuple):
    """What a child has told its parent (0: not yet / idle)."""

    ready_us: int  # monotonic µs when it became ready
    busy_since_us: int  # monotonic µs when its current message started; 0 idle
    received: int
    acked: int
    retried: int
    dead_lettered: int
    late_acks: int
    busy_us: int  # total time in the handler
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
        _FIELDS.pack_into(self._map, index * SLOT_BYTES, 0, 0, 0, 0, 0, 0, 0, 0)
        return index

    def release(self, index: int) -> None:
        self._free.append(index)

    def read(self, index: int) -> SlotView:
        return SlotView(*_FIELDS.unpack_from(self._map, index * SLOT_BYTES))

    # --- child side -------------------------------------------------------

    def set_ready(self, index: int) -> None:
        struct.pack_into("<q", self._map, index * SLOT_BYTES, monotonic_us())

    def set_busy(self, index: int, received: int) -> None:
        """Mark a message started (and count it)."""
        struct.pack_into("<qq", self._map, index * SLOT_BYTES + 8, monotonic_us(), received)

    def set_idle(self, index: int, received: int, acked: int, retried: int, dead_lettered: int, late_acks: int,
                 busy_us: int) -> None:
        """Mark the message settled and publish the counters."""
        base = index * SLOT_BYTES
        _COUNTERS.pack_into(self._map, base + 16, received, acked, retried, dead_lettered, late_acks, busy_us)
        struct.pack_into("<q", self._map, base + 8, 0)
