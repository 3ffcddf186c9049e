"""Replies read alike by both drivers, no I/O: TIME as ms, Redis bytes as
text, WAIT's reply against the replicas wanted (NotReplicated when short),
what a batch's unreachable master leaves as a reply, and the one logger name
of every Redis operation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, TypeVar

import redis.exceptions as rexc

from smqsup.errors import NotReplicated

#: The logger of every Redis operation: one name, the Broker's, whichever
#: class of it runs the operation (operators grep their logs by it).
LOGGER = "smqsup.store.broker"


T = TypeVar("T")


#: A reply of a batch sent to a master that could not be reached.
UNREACHABLE = (rexc.ConnectionError, rexc.TimeoutError, OSError)


def ms_of(time_reply: Sequence[Any]) -> int:
    """TIME's (seconds, microseconds) as whole ms."""
    secs, usecs = time_reply
    return int(secs) * 1000 + int(usecs) // 1000


def text(value: "bytes | str") -> str:
    """Redis bytes as text; bytes that are not UTF-8 are kept as escapes."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def shortfall(got: Any, wanted: int, timeout_ms: int) -> Optional[tuple[int, str]]:
    """(replicas that confirmed, why) when WAIT's reply ``got`` (or its
    refusal) falls short of ``wanted``; None when it does not."""
    if isinstance(got, Exception):
        return 0, f"Redis refused WAIT ({got}), so no replica is known to have it"
    if int(got) < wanted:
        return int(got), f"{int(got)} of {wanted} replica(s) confirmed it within {timeout_ms} ms"
    return None


def confirmed(queue: str, result: T, got: Any, wanted: int, timeout_ms: int) -> T:
    """``result`` if WAIT's reply ``got`` says ``wanted`` replicas have the
    publish to ``queue``; NotReplicated (carrying ``result``) if fewer have it."""
    short = shortfall(got, wanted, timeout_ms)
    if short is not None:
        raise NotReplicated(f"publish to {queue!r}: done on the master, but {short[1]}", short[0], result)
    return result
