"""The publish options (delay, at, priority, dedup_key, dedup_ttl, ttl, result_ttl):
each checked by a small validator, then turned into what the publish script
takes (scripts.Options, in ms).

Every error is a MessageError of one bounded line naming the keyword, raised
before anything is sent.
"""

from __future__ import annotations

import datetime as dt
import math

from smqsup import defaults, framing, safe
from smqsup.client.publish_options import PublishOptions
from smqsup.errors import MessageError
from smqsup.store import scripts

#: Longest delay, ttl or dedup_ttl: ten years, in s (``at`` goes to the year 9999).
MAX_SPAN_S = 3650 * 86400.0
#: Longest dedup key, in UTF-8 bytes (it is part of a Redis key name).
MAX_DEDUP_KEY_BYTES = 512
#: Priorities a message may have; 0 is the default and the fast path.
PRIORITIES = range(10)


def _shown(value: object) -> str:
    return safe.escape(repr(value), 60) if isinstance(value, (int, float, str)) else \
        f"a value of type {type(value).__name__}"


def seconds(value: object, what: str, *, zero_ok: bool) -> float:
    """``value`` (seconds as an int or float, or a timedelta) as finite
    seconds within MAX_SPAN_S; MessageError otherwise."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MessageError(f"{what}: expected seconds (a number or a timedelta), got {_shown(value)}")
    low = "0" if zero_ok else "more than 0"
    try:
        ok = math.isfinite(value) and (value >= 0 if zero_ok else value > 0) and value <= MAX_SPAN_S
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        raise MessageError(f"{what}: expected seconds from {low} to {MAX_SPAN_S:.0f} (ten years), "
                           f"got {_shown(value)}")
    return float(value)


def due_time(value: object) -> float:
    """``at``: an aware datetime or epoch seconds, as epoch seconds."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise MessageError(f"at: a datetime without a timezone is ambiguous; give tzinfo "
                               f"(e.g. datetime.now(timezone.utc)), got {safe.escape(value.isoformat(), 40)}")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MessageError(f"at: expected an aware datetime or epoch seconds, got {_shown(value)}")
    try:
        ok = math.isfinite(value) and 0 <= value <= 253402300799  # 9999-12-31T23:59:59Z
    except OverflowError:
        ok = False
    if not ok:
        raise MessageError(f"at: expected epoch seconds from 0 to 253402300799 (year 9999), got {_shown(value)}")
    return float(value)


def priority(value: object) -> int:
    """An int 0-9 (no bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in PRIORITIES:
        raise MessageError(f"priority: expected an integer from 0 to 9, got {_shown(value)}")
    return int(value)  # an IntEnum member, say, as the plain int the script is sent


def dedup_key(value: object, what: str = "dedup_key") -> str:
    """A non-empty str of at most MAX_DEDUP_KEY_BYTES UTF-8 bytes (a dedup
    key, or ``what``: a partition key)."""
    if not isinstance(value, str):
        raise MessageError(f"{what}: expected a string, got {_shown(value)}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise MessageError(f"{what}: holds a lone surrogate (text that is not valid Unicode)") from None
    if not 1 <= size <= MAX_DEDUP_KEY_BYTES:
        raise MessageError(f"{what}: expected 1 to {MAX_DEDUP_KEY_BYTES} bytes of UTF-8, got {size} "
                           f"({safe.escape(repr(value), 40)})")
    return value


def group(value: object) -> bytes:
    """A message group's name, as its frame carries it: a str of 1 to
    GROUP_NAME_MAX_BYTES bytes of UTF-8, without control characters (it is
    shown in status lines, logs and pages)."""
    if not isinstance(value, str):
        raise MessageError(f"group: expected a string, got {_shown(value)}")
    try:
        name = value.encode("utf-8")
    except UnicodeEncodeError:
        raise MessageError("group: holds a lone surrogate (text that is not valid Unicode)") from None
    if not 1 <= len(name) <= framing.GROUP_NAME_MAX_BYTES:
        raise MessageError(f"group: expected 1 to {framing.GROUP_NAME_MAX_BYTES} bytes of UTF-8, got {len(name)} "
                           f"({safe.escape(repr(value), 40)})")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise MessageError(f"group: holds a control character ({safe.escape(repr(value), 40)})")
    return name


def result_ttl(value: object) -> int:
    """Seconds (a number or a timedelta) from 0 (not tracked) to
    RESULT_TTL_MAX_S, rounded up to whole seconds."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MessageError(f"result_ttl: expected seconds (a number or a timedelta), got {_shown(value)}")
    try:
        ok = math.isfinite(value) and 0 <= value <= defaults.RESULT_TTL_MAX_S
    except OverflowError:
        ok = False
    if not ok:
        raise MessageError(f"result_ttl: expected seconds from 0 (not tracked) to {defaults.RESULT_TTL_MAX_S}, "
                           f"got {_shown(value)}")
    return math.ceil(value)


def dedup_until(value: object, dedup_key: object, dedup_ttl: object) -> str:
    """publish()'s ``dedup_until``: None (""), "done" or "start", only with
    a dedup_key and without a dedup_ttl (the key then holds until its
    message ends, or starts, however long that takes)."""
    if value is None:
        return ""
    if value not in ("done", "start"):
        raise MessageError(f"dedup_until: expected \"done\" or \"start\", got {_shown(value)}")
    if dedup_key is None:
        raise MessageError("dedup_until: given without dedup_key (it says how long a dedup key holds)")
    if dedup_ttl is not None:
        raise MessageError("dedup_until: not with dedup_ttl (the key holds until its message ends or starts)")
    return str(value)


def build(given: PublishOptions, *, default_dedup_ttl_s: float, result_ttl_s: int = 0, events_max: int = 0,
          until: str = "", group_: bytes = b"") -> scripts.Options:
    """The checked options of one publish call, in the script's units
    (``until`` and ``group_`` checked by the caller: dedup_until(), group())."""
    delay, at, ttl, dedup_ttl = given.delay, given.at, given.ttl, given.dedup_ttl
    if delay is not None and at is not None:
        raise MessageError("delay and at: give one of them, not both")
    # Rounded up: a message is never handed out before the time asked for.
    delay_ms = -1 if delay is None else math.ceil(seconds(delay, "delay", zero_ok=True) * 1000)
    at_ms = -1 if at is None else math.ceil(due_time(at) * 1000)
    ttl_ms = 0 if ttl is None else max(1, int(seconds(ttl, "ttl", zero_ok=False) * 1000))
    dedup_s = default_dedup_ttl_s if dedup_ttl is None else seconds(dedup_ttl, "dedup_ttl", zero_ok=False)
    return scripts.Options(priority(given.priority), delay_ms, at_ms, ttl_ms, max(1, int(dedup_s * 1000)),
                           result_ttl_s, events_max, until, given.link, group_)
