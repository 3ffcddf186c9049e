"""The text forms every view shows values from Redis in: a bounded table
cell, a local time, and who paused something when.

Anybody may have written what Redis holds: each value is checked before it
is used and escaped to one bounded line before it is shown.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Optional

from smqsup import safe

#: Widest cell shown, in characters (longer text from Redis is cut).
CELL_CHARS = 60


def cell(value: Any) -> str:
    """Text from Redis as one printable table cell (``-`` for None)."""
    return safe.escape("-" if value is None else value, CELL_CHARS)


def local_time(seconds: Optional[float]) -> str:
    """Local time of a unix time, or ``?`` when unknown or out of range."""
    if seconds is None:
        return "?"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
    except (OverflowError, OSError, ValueError):
        return "?"


def paused_since(info: Mapping[str, Any]) -> str:
    """``since TIME by WHO`` from a paused flag's ``at_ms`` and ``by`` (a
    queue's or a schedule's); ``?`` for a part missing or implausible."""
    at_ms, by = info.get("at_ms"), info.get("by")
    at = "?"
    if isinstance(at_ms, (int, float)) and not isinstance(at_ms, bool) and 0 <= at_ms < 1e15:
        at = local_time(at_ms / 1000)
    return f"since {at} by {safe.escape(by, 200) if isinstance(by, str) else '?'}"
