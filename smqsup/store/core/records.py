"""The record of a tracked message (result_ttl) as readers see it: one
schema, Record, read from the replies of HMGET and ZSCORE by parse() and
found_in(), so the writer (scripts/includes/track.lua) and every reader
(tracking.py, plans.py, the producers) cannot drift. No I/O here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

#: The states a tracked message ends in: its record then lasts result_ttl.
ENDED = frozenset({"done", "dead", "cancelled"})
#: Every state a record may say (anything else in Redis reads as "unknown").
STATES = frozenset({"blocked", "scheduled", "waiting", "active", "retrying"}) | ENDED


@dataclass(frozen=True)
class Record:
    """What Redis holds on one tracked message. ``result`` and ``progress``
    are JSON text as written (None: none); ``meta`` the dead-letter
    metadata of one that died (reason, error...), else empty."""

    state: str
    attempts: int = 0
    at_ms: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    result: Optional[str] = None
    progress: Optional[str] = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def final(self) -> bool:
        """No wait can change it: it ended, or it is garbage (state "unknown":
        not what track.lua writes, so nothing will ever publish its end)."""
        return self.state in ENDED or self.state == "unknown"

    @property
    def reason(self) -> str:
        reason = self.meta.get("reason")
        return reason if isinstance(reason, str) else ("cancelled" if self.state == "cancelled" else "unknown")


def text_of(value: Any) -> Optional[str]:
    """Bytes Redis returned as text (None stays None; undecodable: None)."""
    if value is None:
        return None
    try:
        return bytes(value).decode("utf-8")
    except (UnicodeDecodeError, TypeError):
        return None


def json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def parse(raw: Any, result: Any, progress: Any, expires_ms: Any, now_ms: int) -> Optional[Record]:
    """The Record of replies HMGET (record, result, progress) and ZSCORE
    (its expiry) gave at ``now_ms``; None when there is none or its time has
    passed (removal is lazy). A record that is not what track.lua writes
    (garbage someone put there) reads as state "unknown", never an error."""
    if raw is None:
        return None
    try:
        if expires_ms is not None and float(expires_ms) <= now_ms:
            return None
    except (TypeError, ValueError):
        pass
    try:
        data = json.loads(text_of(raw) or "")
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return Record("unknown")
    state, attempts, at_ms, meta = data.get("state"), data.get("attempts"), data.get("at_ms"), data.get("meta")
    return Record(state if state in STATES else "unknown",
                  attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
                  at_ms if isinstance(at_ms, int) and not isinstance(at_ms, bool) else 0,
                  meta if isinstance(meta, dict) else {}, text_of(result), text_of(progress))


def found_in(names: Sequence[str], replies: Sequence[Any], now_ms: int) -> Optional[tuple[str, Record]]:
    """The first of ``names`` (partitions) whose replies, HMGET (record,
    result, progress) and ZSCORE (its expiry) in pairs, hold a record at
    ``now_ms``, and that record; None when none does. A key of the wrong
    type (its reply an error) holds nothing readable."""
    for i, name in enumerate(names):
        fields, expires = replies[2 * i], replies[2 * i + 1]
        if isinstance(fields, Exception):
            continue
        raw, result, progress = fields
        record = parse(raw, result, progress, None if isinstance(expires, Exception) else expires, now_ms)
        if record is not None:
            return name, record
    return None
