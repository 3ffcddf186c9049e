"""What a consumer's registry entry says about it: one schema, written by
whoever renews its heartbeat and read by status, /metrics and the web page.

    supervisor (arbiter) ─┐                          ┌─▶ stats.snapshot ─▶ status, web, /metrics
    standalone liveness ──┼─▶ ConsumerInfo.to_json ─▶ ns:{Q}:consumers ─┤
    consumer registration ┘                          └─▶ the supervisor's start-up orphan check

Reading never fails: the registry is Redis state anybody may have written,
so ``from_json`` keeps each field only when it has the right type and a
plausible value, and leaves the default otherwise.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, fields
from typing import Any, Optional

from smqsup.config.model import CONCURRENCY_MAX

#: Longest text field kept when reading (host names, queue names).
_TEXT_CHARS = 256
#: Largest integer kept when reading (counters, bytes, pids).
_INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class ConsumerInfo:
    """One consumer: who it is, its resources and its counters.

    Every field but ``busy`` is None when unknown: a standalone consumer
    (``smqsup consume``) has no ``index`` or ``supervisor``, ``uss`` cannot
    always be read, and a registry entry holding garbage yields None rather
    than a made-up 0.
    """

    pid: Optional[int] = None
    host: Optional[str] = None
    queue: Optional[str] = None
    index: Optional[int] = None  # the "#2" of a supervised consumer
    supervisor: Optional[int] = None  # its supervisor's pid
    started_at: Optional[float] = None  # unix seconds
    cpu: Optional[float] = None  # percent of one core
    rss: Optional[int] = None  # bytes
    uss: Optional[int] = None  # bytes
    busy: bool = False
    in_flight: Optional[int] = None  # messages its handlers run now
    concurrency: Optional[int] = None  # the most it runs at once (the queue's concurrency)
    received: Optional[int] = None
    acked: Optional[int] = None
    retried: Optional[int] = None
    dead_lettered: Optional[int] = None
    late_acks: Optional[int] = None
    busy_s: Optional[float] = None  # total time in the handler
    rate: Optional[float] = None  # messages per second, smoothed over about 10 s

    def to_dict(self) -> dict[str, Any]:
        # Every field is a scalar: a plain copy does (asdict deep-copies each
        # value, most of the cost of a heartbeat's JSON).
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: "bytes | str") -> "ConsumerInfo":
        """The info ``raw`` holds; fields that are missing, of the wrong type
        or implausible are None, and bytes that are not a JSON object give an
        info with every field unknown."""
        try:
            data = json.loads(raw)
        except Exception:  # noqa: BLE001 - hostile bytes: not JSON, too deep, not UTF-8
            return cls()
        if not isinstance(data, dict):
            return cls()
        kept = {name: _coerce(data.get(name), kind) for name, kind in _KINDS.items()}
        for name, (low, high) in _RANGES.items():
            if kept[name] is not None and not low <= kept[name] <= high:
                kept[name] = None
        kept["busy"] = data.get("busy") is True
        return cls(**kept)


#: The type of each field a reader keeps (``busy`` aside).
_KINDS: dict[str, type] = {
    "pid": int, "host": str, "queue": str, "index": int, "supervisor": int, "started_at": float, "cpu": float,
    "rss": int, "uss": int, "in_flight": int, "concurrency": int, "received": int, "acked": int, "retried": int, "dead_lettered": int,
    "late_acks": int, "busy_s": float, "rate": float,
}
assert set(_KINDS) | {"busy"} == {f.name for f in fields(ConsumerInfo)}
#: Integer fields whose plausible values are narrower than 0..2**63-1: no
#: consumer runs more messages at once than a queue's concurrency may be.
_RANGES: dict[str, tuple[int, int]] = {"in_flight": (0, CONCURRENCY_MAX), "concurrency": (1, CONCURRENCY_MAX)}


def _coerce(value: Any, kind: type) -> Any:
    """``value`` if it is a plausible ``kind``, else None."""
    if isinstance(value, bool):
        return None
    if kind is int:
        return value if isinstance(value, int) and 0 <= value <= _INT_MAX else None
    if kind is float:
        ok = isinstance(value, (int, float)) and math.isfinite(value) and abs(value) < 1e15
        return float(value) if ok else None
    return value[:_TEXT_CHARS] if isinstance(value, str) else None


class RateMeter:
    """Messages per second from a growing count, smoothed over about 10 s
    (what a heartbeat's ``rate`` says)."""

    def __init__(self) -> None:
        self.rate = 0.0
        self._mark: tuple[float, int] = (0.0, 0)  # (monotonic time, count) of the last update

    def update(self, count: int) -> float:
        """Take the count now; return the smoothed rate, rounded for display."""
        now = time.monotonic()
        then, seen = self._mark
        if then:
            instant = (count - seen) / max(now - then, 1e-3)
            self.rate += (instant - self.rate) * min(1.0, (now - then) / 10.0)
        self._mark = (now, count)
        return round(self.rate, 2)
