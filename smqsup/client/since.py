"""What ``since`` means where a reading of a queue's events starts: one rule
for Producer.events, AsyncProducer.events and ``smqsup events --since``,
without I/O (nor redis-py: the command line checks it as it parses).

- ``"now"``: only what comes next;
- an entry id ``MS-SEQ`` (an Event's ``cursor``): what comes after it;
- unix **seconds**: a number, or text of ASCII digits with at most 6
  decimals (``1700000000``, ``"1700000000.5"``): the events from then on;
- an ISO-8601 time (text; UTC unless it says otherwise): the same.

Seconds past year 9999 are refused, with a hint: they are milliseconds
(``1700000000000``), and a reading from then on would show nothing without
saying why. (A time in ms is the cursor ``MS-0``.)
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Union

from smqsup import safe

#: The latest unix seconds a time may name: 9999-12-31T23:59:59Z.
MAX_SECONDS = 253_402_300_799
#: An entry id as the events carry it ("ms-seq"); each part below 2**64.
_CURSOR = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
#: Unix seconds as text, with at most microseconds.
_SECONDS = re.compile(r"[0-9]{1,20}(\.[0-9]{1,6})?")
#: What a bad value is told it should have been.
EXPECTED = "expected now, a cursor MS-SEQ, unix seconds or an ISO-8601 time from 1970 on"


def parse(text: str) -> Union[str, float]:
    """``since`` given as text: "now" or a cursor as they are, a time as
    unix seconds (float). ValueError, one line starting with EXPECTED."""
    if text == "now":
        return text
    cursor = _CURSOR.fullmatch(text)
    if cursor is not None and all(int(part) < 2**64 for part in cursor.groups()):
        return text
    if _SECONDS.fullmatch(text):
        return seconds(float(text), text)
    try:  # Python 3.10's fromisoformat takes no "Z"
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text)
        value = (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()
    except (ValueError, OverflowError, OSError):
        value = -1.0
    return seconds(value, text)


def seconds(value: float, shown: object = None) -> float:
    """``value`` as unix seconds from 0 to MAX_SECONDS; ValueError (one
    line starting with EXPECTED, a hint for milliseconds) otherwise."""
    got = safe.escape(repr(value if shown is None else shown), 60)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{EXPECTED}, got {got}")
    if value > MAX_SECONDS * 1000:
        raise ValueError(f"{EXPECTED}, got {got}: past year 9999")
    if value > MAX_SECONDS:
        raise ValueError(f"{EXPECTED}, got {got}: past year 9999 as unix seconds (milliseconds? divide them "
                         f"by 1000, or pass the cursor '{int(value)}-0')")
    return float(value)
