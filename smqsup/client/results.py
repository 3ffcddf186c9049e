"""What a producer makes of a tracked message's record (store/ops/tracking.py):
its result, its state, its progress, or the error saying why there is none.
No I/O here: the sync and the asyncio producer read the record, this turns
it into their answer."""

from __future__ import annotations

import json
from typing import Any, Optional

from smqsup import safe
from smqsup.errors import MessageError, MessageFailed, ResultUnknown
from smqsup.store.core.records import Record

#: What state() says of a message nothing is known of.
UNKNOWN = "unknown"


def _decoded(text: Optional[str]) -> Any:
    """JSON text as written by a consumer (None: None; garbage someone put
    in Redis: the text itself, never an error)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


#: Longest wait result() accepts, s (a year): None waits that long.
WAIT_MAX_S = 86400.0 * 365


def wait_s(timeout: object) -> float:
    """result()'s ``timeout``: seconds from 0, None for ever (a year);
    MessageError for anything else (NaN, negative, a bool)."""
    if timeout is None:
        return WAIT_MAX_S
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= WAIT_MAX_S:
        raise MessageError(f"timeout: expected seconds from 0 to {WAIT_MAX_S:.0f} or None, "
                           f"got {safe.escape(repr(timeout), 60)}")
    return float(timeout)


def unknown(queue: str, message_id: str) -> ResultUnknown:
    return ResultUnknown(f"queue {queue!r}: nothing is known of message {message_id!r} (never tracked: publish "
                         "with result_ttl; or its result_ttl passed)")


def to_wait(found: Optional[tuple[str, Record]], wait_s: float) -> Optional[str]:
    """The partition result() waits on, given what the first read ``found``
    (partition, record) and its wait ``wait_s``: None when the answer is
    already known (no record, a final one: ended or garbage) or no wait is asked."""
    if found is None or found[1].final or wait_s <= 0:
        return None
    return found[0]


def result_of(record: Optional[Record], queue: str, message_id: str, timeout_s: Optional[float]) -> Any:
    """The result of a message whose record is ``record`` after a wait of
    ``timeout_s``: its handler's return value once done; MessageFailed once
    it ended in the dead letters; TimeoutError while it has not ended;
    ResultUnknown without a record, or with one that is garbage (state
    "unknown": nothing will ever end it)."""
    if record is None or record.state == UNKNOWN:
        raise unknown(queue, message_id)
    if record.state == "done":
        return _decoded(record.result)
    if record.ended:
        reason = record.reason
        raise MessageFailed(f"queue {queue!r}: message {message_id!r} {record.state}: "
                            f"{safe.escape(reason, 300)} (after {record.attempts} failed attempts)",
                            queue=queue, message_id=message_id, reason=reason, attempts=record.attempts)
    raise TimeoutError(f"queue {queue!r}: message {message_id!r} has not ended within {timeout_s or 0:g} s "
                       f"(it is {record.state})")


def state_of(record: Optional[Record]) -> str:
    """scheduled, waiting, active, retrying, done, dead, cancelled or unknown."""
    return UNKNOWN if record is None else record.state


def progress_of(record: Optional[Record], queue: str, message_id: str) -> Any:
    """The last progress its handler reported (None: none yet); ResultUnknown
    without a record, or with one that is garbage."""
    if record is None or record.state == UNKNOWN:
        raise unknown(queue, message_id)
    return _decoded(record.progress)
