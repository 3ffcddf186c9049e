"""Message ids: unique across processes and hosts, sorted by creation time.

An id is 12 hex digits of milliseconds, 8 hex digits of process identity
and 6 hex digits of a per-process sequence (26 lowercase hex characters):
the identity is random and renewed after a fork, the time part never goes
backwards within a process.
"""

from __future__ import annotations

import os
import secrets
import threading
import time

_id_lock = threading.Lock()
_node = secrets.token_hex(4)
_last_ms = 0
_seq = 0


def _reset_after_fork() -> None:
    global _node, _last_ms, _seq, _id_lock
    _node = secrets.token_hex(4)
    _last_ms = 0
    _seq = 0
    _id_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def new_id() -> str:
    """A unique, time-ordered message id (26 lowercase hex characters)."""
    global _last_ms, _seq
    with _id_lock:
        # Never let the time part go backwards (wall clock stepped back).
        ms = max(time.time_ns() // 1_000_000, _last_ms)
        if ms == _last_ms:
            _seq += 1
            if _seq > 0xFFFFFF:
                ms += 1
                _seq = 0
        else:
            _seq = 0
        _last_ms = ms
        return f"{ms:012x}{_node}{_seq:06x}"


def new_ids(count: int) -> list[str]:
    """``count`` new ids at once (one lock round), in order."""
    global _last_ms, _seq
    if count <= 0:
        return []
    with _id_lock:
        ms = max(time.time_ns() // 1_000_000, _last_ms)
        seq = _seq + 1 if ms == _last_ms else 0
        node = _node
        out = []
        for _ in range(count):
            if seq > 0xFFFFFF:
                ms += 1
                seq = 0
            out.append(f"{ms:012x}{node}{seq:06x}")
            seq += 1
        _last_ms, _seq = ms, seq - 1
    return out
