"""What each supervisor says of the consumers it runs for a queue: one schema,
SupervisorInfo, written by the supervisor every few seconds into the queue's
supervisors hash and read by status, the web UI and /metrics.

    supervisor ─▶ Supervisors.write (to_json) ─▶ ns:{Q}:supervisors ─┬▶ Supervisors.read (live) ─▶ the supervisor's peers
                                                 field "HOST:PID"     └▶ stats.snapshot (live) ─▶ status, web, /metrics

A supervisor killed with SIGKILL cannot take its field away: readers drop a
field not rewritten for SUPERVISOR_INFO_STALE_EVERIES of its own intervals
(live), and the hash expires once no supervisor writes it. Reading never
fails: the hash is Redis state anybody may have written, so ``from_json``
gives None for anything but a plausible entry, which is then left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Optional, cast

from smqsup import defaults
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import ms_of
from smqsup.store.sync.session import Session

#: Largest consumer count (target, bounds, running, a scale event's) an entry may say.
_COUNT_MAX = 1_000_000
#: Largest pid an entry may say (Linux's pid_max is at most 2**22).
_PID_MAX = 2**31 - 1
#: Latest time (ms since the epoch) an entry may say: year 2286.
_MS_MAX = 10**13
#: Longest interval between two rewrites an entry may say, in s.
_EVERY_MAX_S = 86_400.0
#: An entry dated further ahead of the reader's clock than this was written
#: by no supervisor (its clock would be a day wrong); it is dropped, in ms.
_AHEAD_MAX_MS = 86_400_000
_TEXT_CHARS = defaults.SUPERVISOR_INFO_TEXT_CHARS


@dataclass(frozen=True)
class SupervisorInfo:
    """One supervisor's consumers of one queue: how many it aims at now
    (``target``) within ``min``..``max`` (both the fixed count when not
    ``autoscaled``), how many are ready (``running``), whether it rolls
    them now (``rolling``) or its last roll failed (``roll_failed``, one
    line), its last scale event (``scaled``: at_ms, from, to, why), how
    often it rewrites this (``every_s``) and when it wrote it (``at_ms``,
    ms since the epoch by its own clock)."""

    host: str
    pid: int
    target: int
    min: int
    max: int
    running: int
    autoscaled: bool
    rolling: bool
    roll_failed: Optional[str]
    scaled: Optional[dict[str, Any]]
    every_s: float
    at_ms: int

    @property
    def field(self) -> str:
        """Its field in the queue's supervisors hash: HOST:PID."""
        return f"{self.host}:{self.pid}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, raw: "bytes | str") -> Optional["SupervisorInfo"]:
        """The info ``raw`` holds, or None when it is not a JSON object with
        every field of the right type and plausible (text is cut to
        SUPERVISOR_INFO_TEXT_CHARS, a roll failure to its first line)."""
        try:
            data = json.loads(raw)
        except Exception:  # noqa: BLE001 - hostile bytes: not JSON, too deep, not UTF-8
            return None
        if not isinstance(data, dict):
            return None
        try:
            return cls(host=_text(data["host"]), pid=_int(data["pid"], 1, _PID_MAX),
                       target=_count(data["target"]), min=_count(data["min"]), max=_count(data["max"]),
                       running=_count(data["running"]), autoscaled=_flag(data["autoscaled"]),
                       rolling=_flag(data["rolling"]), roll_failed=_line(data.get("roll_failed")),
                       scaled=_scaled(data.get("scaled")), every_s=_every(data["every_s"]),
                       at_ms=_int(data["at_ms"], 0, _MS_MAX))
        except (KeyError, _Implausible):
            return None


class _Implausible(Exception):
    """A field of an entry that is missing, of the wrong type or implausible."""


def _int(value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _Implausible
    return value


def _count(value: Any) -> int:
    return _int(value, 0, _COUNT_MAX)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Implausible
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Implausible
    return value[:_TEXT_CHARS]


def _line(value: Any) -> Optional[str]:
    """Optional text, its first line."""
    return None if value is None else (_text(value).splitlines() or [""])[0]


def _every(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Implausible
    if not (math.isfinite(value) and 0 < value <= _EVERY_MAX_S):
        raise _Implausible
    return float(value)


def _scaled(value: Any) -> Optional[dict[str, Any]]:
    """A scale event: exactly at_ms, from, to and why, or None (none yet)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Implausible
    return {"at_ms": _int(value.get("at_ms"), 0, _MS_MAX), "from": _count(value.get("from")),
            "to": _count(value.get("to")), "why": _text(value.get("why"))}


def stale_after_ms(info: SupervisorInfo) -> float:
    """How long after its ``at_ms`` an entry is stale: its supervisor stopped rewriting it."""
    return max(defaults.SUPERVISOR_INFO_STALE_EVERIES * info.every_s, defaults.SUPERVISOR_INFO_STALE_MIN_S) * 1000


def live(raw: Mapping[Any, Any], now_ms: int) -> list[SupervisorInfo]:
    """The entries of a supervisors hash (field -> JSON, as HGETALL gives it)
    that are plausible and fresh at ``now_ms`` (the Redis clock), by host then pid."""
    infos = [info for value in raw.values() if (info := SupervisorInfo.from_json(value)) is not None
             and -_AHEAD_MAX_MS <= now_ms - info.at_ms <= stale_after_ms(info)]
    return sorted(infos, key=lambda info: (info.host, info.pid))


class Supervisors:
    """The supervisors hashes of queues (see the module's docstring)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def write(self, infos: Mapping[str, SupervisorInfo], field: str, keep_s: float) -> Optional[int]:
        """Write ``field`` (this supervisor's HOST:PID) in the supervisors hash
        of each queue (name -> its info), and make each hash expire
        ``keep_s`` after: one pipelined round trip (a cluster's, one per
        master). Returns the Redis clock (ms) of the write, which the writer
        dates its next infos by (readers decider them by that clock)."""
        if not infos:
            return None
        keep_ms = max(1, round(keep_s * 1000))
        with wrapped("write the supervisor's info"):
            now, _ = self._session.with_clock(lambda pipe: [
                (pipe.hset(k, field, info.to_json()), pipe.pexpire(k, keep_ms))
                for k, info in ((self._session.keys(queue).supervisors, info) for queue, info in infos.items())])
        return ms_of(now)

    def forget(self, queues: Iterable[str], field: str) -> None:
        """Delete ``field`` from the supervisors hash of each of ``queues``, in one round trip."""
        keys = [self._session.keys(queue).supervisors for queue in queues]
        if not keys:
            return
        with wrapped("forget the supervisor's info"):
            pipe = self._session.client.pipeline(transaction=False)
            for key in keys:
                pipe.hdel(key, field)
            pipe.execute()

    def read(self, queue: str, now_ms: int) -> list[SupervisorInfo]:
        """What the live supervisors of ``queue`` say (live(): fresh at
        ``now_ms``, by the Redis clock), by host then pid."""
        with wrapped(f"read the supervisors of {queue!r}"):
            raw = cast(dict[bytes, bytes], self._session.client.hgetall(self._session.keys(queue).supervisors))
        return live(raw, now_ms)

    def live_pids(self, queues: Iterable[str], host: str) -> set[int]:
        """The pids of ``host`` that a live entry of any of ``queues``' hashes
        names (by the Redis clock): the supervisors running there, as they say
        themselves through Redis, in one round trip."""
        keys = [self._session.keys(queue).supervisors for queue in queues]
        with wrapped("read the supervisors of the queues"):
            now, replies = self._session.with_clock(lambda pipe: [pipe.hgetall(k) for k in keys])
        return {info.pid for raw in replies for info in live(raw, ms_of(now)) if info.host == host}

