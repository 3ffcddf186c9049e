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
from dataclasses import asdict, dataclass, fields
from typing import Any, Optional

#: Longest text field kept when reading (host names, queue names).
_TEXT_CHARS = 256
#: Largest integer kept when reading (counters, bytes, pids).
_INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class ConsumerInfo:
    """One consumer: who it is, its resources and its counters.

    ``index`` and ``supervisor`` are 0 for a consumer run without a supervisor
    (``smqsup consume``); ``uss`` is None where it cannot be read.
    """

    pid: int = 0
    host: str = ""
    queue: str = ""
    index: int = 0
    supervisor: int = 0
    started_at: float = 0.0  # unix seconds
    cpu: float = 0.0  # percent of one core
    rss: int = 0  # bytes
    uss: Optional[int] = None  # bytes
    busy: bool = False
    received: int = 0
    acked: int = 0
    retried: int = 0
    dead_lettered: int = 0
    late_acks: int = 0
    busy_s: float = 0.0  # total time in the handler
    rate: float = 0.0  # messages per second, smoothed over about 10 s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: "bytes | str") -> "ConsumerInfo":
        """The info ``raw`` holds; fields that are missing, of the wrong type
        or implausible keep their defaults, and bytes that are not a JSON
        object give all defaults."""
        try:
            data = json.loads(raw)
        except Exception:  # noqa: BLE001 - hostile bytes: not JSON, too deep, not UTF-8
            return cls()
        if not isinstance(data, dict):
            return cls()
        kept = {}
        for f in fields(cls):
            value = _coerce(data.get(f.name), f.default)
            if value is not None or f.default is None:
                kept[f.name] = value
        return cls(**kept)


def _coerce(value: Any, default: Any) -> Any:
    """``value`` if it fits a field whose default is ``default``, else None."""
    if default is None or isinstance(default, int) and not isinstance(default, bool):
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT_MAX
        return value if ok else None
    if isinstance(default, bool):
        return value if isinstance(value, bool) else None
    if isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if ok and abs(value) < 1e15 else None
    if isinstance(default, str):
        return value[:_TEXT_CHARS] if isinstance(value, str) else None
    return None
