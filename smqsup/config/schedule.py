"""Schedules: queues.yaml's ``schedules:`` section validated into frozen
dataclasses, their definition as stored in Redis, and when they come due.

Everything here is pure (no Redis, no clock): times are whole milliseconds
since the Unix epoch, and the caller passes "now" (the Redis clock: gc.py's
collector reads TIME, so every supervisor computes the same slots).

    every: P     slots at the multiples of P since the Unix epoch (UTC):
                 ``every: 30s`` fires at :00 and :30 of every minute, whoever
                 runs it and whenever it was declared; no time zone applies.
    cron: EXPR   slots where EXPR matches the wall clock of ``timezone``
                 (default UTC), computed by cronsim, which matches Debian's
                 cron across DST changes: a daily job in a skipped hour runs
                 at the end of the gap, one in a repeated hour runs once;
                 jobs of an hour or less run at every real instant that
                 matches.

A slot that comes due while nobody can fire it (a collector failover, Redis
restarting) still fires, late, while it is at most ``grace`` late; older slots
are missed: ``catch_up: true`` fires one message for all of them (the latest
one's time, header ``smqsup-catch-up``), ``false`` skips them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from typing import Any, Optional

from smqsup import message
from smqsup.config import names, scalars
from smqsup.config.env import expand_env, storable
from smqsup.config.problems import MISSING, error, join_key
from smqsup.errors import ConfigError

# --- bounds ---------------------------------------------------------------------------

#: Shortest ``every``, in ms: the collector looks about every 100 ms, and one
#: message a second per schedule is far from any load worth a queue.
EVERY_MIN_MS = 1000
#: Longest ``every``, in ms (365 days, the longest duration of the file).
EVERY_MAX_MS = 365 * 86_400_000
#: ``grace``: from 1 s (below, ordinary lateness would count as missed) to 1 day.
GRACE_MIN_MS = 1000
GRACE_MAX_MS = 86_400_000
#: How late a slot may be and still fire, by default, in ms: a collector
#: failover (about heartbeat_timeout) or a Redis restart is far shorter.
GRACE_DEFAULT_MS = 60_000
#: Longest cron expression, in characters.
CRON_MAX_CHARS = 200
#: Largest body plus headers of one schedule, as JSON, in bytes: the
#: definition is stored in Redis and read at every look of the collector.
DEFINITION_MAX_BYTES = 64 * 1024
#: Most schedules in one file.
SCHEDULES_MAX = 1000
#: Headers every fired message carries (a schedule's own headers may not use the prefix).
HEADER_PREFIX = "smqsup-"
HEADER_SCHEDULE = "smqsup-schedule"
HEADER_FIRE_TIME = "smqsup-fire-time"
HEADER_CATCH_UP = "smqsup-catch-up"

_KEYS = ("queue", "cron", "every", "timezone", "body", "headers", "catch_up", "grace")
_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
#: An IANA zone name as the tz database spells them (Europe/Berlin, Etc/GMT+5).
_ZONE = re.compile(r"[A-Za-z0-9_+-]{1,64}(?:/[A-Za-z0-9_+-]{1,64}){0,3}")
_INT64 = 2**63


@dataclass(frozen=True)
class ScheduleConfig:
    """One schedule: the queue it publishes to, when, and what."""

    name: str
    queue: str
    cron: Optional[str] = None  # one of cron and every_ms is set
    every_ms: Optional[int] = None
    timezone: str = "UTC"
    body: Any = None  # a JSON value
    headers: Optional[Mapping[str, Any]] = None
    catch_up: bool = False
    grace_ms: int = GRACE_DEFAULT_MS

    @property
    def when(self) -> str:
        """How it is timed, for people: ``cron 0 3 * * *`` or ``every 30s``."""
        return f"cron {self.cron}" if self.cron is not None else f"every {duration_text(self.every_ms or 0)}"

    def to_json(self) -> str:
        """The definition stored in Redis: canonical JSON (sorted keys, ASCII),
        so that equal definitions are equal bytes and have one digest."""
        return json.dumps({"v": 1, "queue": self.queue, "cron": self.cron, "every_ms": self.every_ms,
                           "timezone": self.timezone, "body": self.body, "headers": dict(self.headers or {}),
                           "catch_up": self.catch_up, "grace_ms": self.grace_ms},
                          sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)

    @property
    def digest(self) -> str:
        """SHA-1 of ``to_json()`` (what the scripts compare, with redis.sha1hex)."""
        return hashlib.sha1(self.to_json().encode("ascii")).hexdigest()


def duration_text(ms: int) -> str:
    """A period in ms the way the file writes it: 30s, 1m, 1500ms."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


# --- validation -----------------------------------------------------------------------


def section(value: object, queues: Mapping[str, object], path: str) -> dict[str, ScheduleConfig]:
    """queues.yaml's ``schedules:`` (absent or null: none), every schedule
    validated against the configured ``queues``; ConfigError for the first fault."""
    if value is None or value is MISSING:
        return {}
    if not isinstance(value, dict):
        raise error("expected a mapping of schedule names to their settings", value, path=path, key="schedules")
    if len(value) > SCHEDULES_MAX:
        raise error(f"at most {SCHEDULES_MAX} schedules", len(value), path=path, key="schedules")
    return {s.name: s for s in (one(name, item, queues, path) for name, item in value.items())}


def one(name: object, value: object, queues: Mapping[str, object], path: str,
        where: str = "schedules") -> ScheduleConfig:
    """One schedule's settings (``value``) validated; ``where`` is its parent key."""
    key = join_key(where, name)
    name = names.queue_or_namespace(name, key, path)
    if not isinstance(value, dict):
        raise error("expected a mapping with queue and cron or every", value, path=path, key=key)
    raw: dict[str, object] = {}
    for item_key, item in value.items():
        if not isinstance(item_key, str) or item_key not in _KEYS:
            raise error(f"unknown key (expected one of: {', '.join(_KEYS)})", path=path, key=join_key(key, item_key))
        where_item = join_key(key, item_key)
        # body and headers are JSON taken as written (no ${VAR} inside them).
        raw[item_key] = item if item_key in ("body", "headers") else storable(
            expand_env(item, where_item, path), where_item, path)
    if "queue" not in raw or raw["queue"] is None:
        raise error("missing: the queue the schedule publishes to", path=path, key=join_key(key, "queue"))
    queue = names.queue_or_namespace(raw["queue"], join_key(key, "queue"), path)
    if queue not in queues:
        raise error(f"unknown queue (queues: {', '.join(sorted(queues)) or 'none'})", queue, path=path,
                    key=join_key(key, "queue"))
    cron, every_ms = _timing(raw, key, path)
    zone = "UTC"
    if raw.get("timezone") is not None:
        if every_ms is not None:
            raise error("applies to cron only (every is aligned to the Unix epoch, UTC); remove it", raw["timezone"],
                        path=path, key=join_key(key, "timezone"))
        zone = zone_name(raw["timezone"], join_key(key, "timezone"), path)
    headers = _headers(raw.get("headers"), join_key(key, "headers"), path)
    body = json_value(raw.get("body"), join_key(key, "body"), path)
    size = len(json.dumps([body, headers], ensure_ascii=False).encode("utf-8"))
    if size > DEFINITION_MAX_BYTES:
        raise error(f"body and headers must be at most {DEFINITION_MAX_BYTES // 1024}KB as JSON", f"{size} bytes",
                    path=path, key=join_key(key, "body"))
    return ScheduleConfig(
        name=name, queue=queue, cron=cron, every_ms=every_ms, timezone=zone, body=body, headers=headers,
        catch_up=scalars.boolean(raw["catch_up"], join_key(key, "catch_up"), path)
        if raw.get("catch_up") is not None else False,
        grace_ms=_grace(raw["grace"], join_key(key, "grace"), path) if raw.get("grace") is not None
        else GRACE_DEFAULT_MS)


def _timing(raw: Mapping[str, object], key: str, path: str) -> tuple[Optional[str], Optional[int]]:
    cron, every = raw.get("cron"), raw.get("every")
    if cron is not None and every is not None:
        raise error("give cron or every, not both", path=path, key=key)
    if cron is None and every is None:
        raise error("missing: give cron (e.g. '0 3 * * *') or every (e.g. 30s)", path=path, key=key)
    if cron is not None:
        return cron_expression(cron, join_key(key, "cron"), path), None
    seconds = scalars.parse_duration(every, join_key(key, "every"), path)
    every_ms = round(seconds * 1000)
    if not EVERY_MIN_MS <= every_ms <= EVERY_MAX_MS:
        raise error("expected a duration from 1s to 365d", every, path=path, key=join_key(key, "every"))
    return None, every_ms


def _grace(value: object, key: str, path: str) -> int:
    ms = round(scalars.parse_duration(value, key, path) * 1000)
    if not GRACE_MIN_MS <= ms <= GRACE_MAX_MS:
        raise error("expected a duration from 1s to 1d", value, path=path, key=key)
    return ms


def cron_expression(value: object, key: str, path: str) -> str:
    """A cron expression cronsim takes (5 fields, or 6 with seconds first; the
    @daily-style macros but @reboot), spaces normalised."""
    if not isinstance(value, str) or not value.strip():
        raise error("expected a cron expression like '0 3 * * *' (quote it)", value, path=path, key=key)
    if len(value) > CRON_MAX_CHARS:
        raise error(f"a cron expression is at most {CRON_MAX_CHARS} characters", value, path=path, key=key)
    expr = " ".join(value.split())
    expr = _MACROS.get(expr.lower(), expr)
    if expr.startswith("@"):
        raise error(f"unsupported macro (expected one of {', '.join(_MACROS)})", value, path=path, key=key)
    try:
        matches = _comes_due(expr)
    except Exception as exc:  # noqa: BLE001 - cronsim's CronSimError, or whatever odd text makes it raise
        raise error(f"invalid cron expression ({exc or type(exc).__name__})", value, path=path, key=key) from None
    if not matches:
        raise error("never comes due (no date matches it)", value, path=path, key=key)
    return expr


@functools.lru_cache(maxsize=4096)
def _comes_due(expr: str) -> bool:
    """Whether ``expr`` matches a date in the 50 years from 2000 (cronsim's search), searched once
    per expression: from a fixed date, not the epoch, so a rare one's cost does not grow with the years."""
    return next(_cronsim(expr, datetime(2000, 1, 1, tzinfo=timezone.utc)), None) is not None


def zone_name(value: object, key: str, path: str) -> str:
    """An IANA time zone name the tz database of this machine knows."""
    if not isinstance(value, str) or not _ZONE.fullmatch(value) or ".." in value:
        raise error("expected a time zone name like Europe/Berlin or UTC", value, path=path, key=key)
    try:
        load_zone(value)
    except ConfigError as exc:
        raise error(str(exc), value, path=path, key=key) from None
    return value


def load_zone(name: str) -> tzinfo:
    """The tzinfo of ``name``; "UTC" needs no tz database. ConfigError (the
    problem alone) when the zone is unknown or there is no database at all."""
    if name == "UTC":
        return timezone.utc
    import zoneinfo  # here, not at the top: it pulls in sysconfig, kept out of the supervisor parent

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        if not zoneinfo.available_timezones():
            raise ConfigError("unknown time zone: this machine has no time zone database (install the tzdata "
                              "system package, or pip install tzdata)") from None
        raise ConfigError("unknown time zone (names are case-sensitive, e.g. Europe/Berlin)") from None


def _headers(value: object, key: str, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error("expected a mapping of header names to JSON values", value, path=path, key=key)
    for name in value:
        if isinstance(name, str) and name.lower().startswith(HEADER_PREFIX):
            raise error(f"header names starting with {HEADER_PREFIX!r} are smqsup's own", name, path=path,
                        key=join_key(key, name))
    checked = json_value(value, key, path)
    assert isinstance(checked, dict)
    return checked


def json_value(value: object, key: str, path: str, depth: int = 0) -> Any:
    """``value`` if it is JSON: null, booleans, 64-bit integers, finite
    floats, text, lists, and mappings with text keys (YAML's dates, sets,
    binary and non-text keys are refused, not converted)."""
    if depth > 20:
        raise error("nested deeper than 20 levels", path=path, key=key)
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str):
            storable(value, key, path)
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise error("integers must fit in 64 bits", value, path=path, key=key)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error("expected a finite number (JSON has no NaN or infinity)", value, path=path, key=key)
        return value
    if isinstance(value, list):
        return [json_value(item, f"{key}[{i}]", path, depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise error("mapping keys must be text (quote them)", name, path=path, key=key)
            storable(name, key, path)
            out[name] = json_value(item, join_key(key, name), path, depth + 1)
        return out
    raise error(f"not JSON: a YAML {type(value).__name__} (quote it)", path=path, key=key)


# --- slots ------------------------------------------------------------------------------


class NeverDue(Exception):
    """The cron expression matches no date within cronsim's 50-year search
    (or after a time no datetime holds: state in Redis is anyone's)."""


def _cronsim(expr: str, start: datetime, reverse: bool = False) -> Any:
    from cronsim import CronSim  # imported where schedules are used: not for every command line

    return CronSim(expr, start, reverse=reverse)


def next_after(s: ScheduleConfig, t_ms: int) -> int:
    """The first slot strictly after ``t_ms``. NeverDue if none within 50 years."""
    if s.every_ms is not None:
        return (t_ms // s.every_ms + 1) * s.every_ms
    assert s.cron is not None
    # Cron slots are whole seconds: the first one after the whole second at
    # or before t_ms is also the first one after t_ms.
    try:
        start = datetime.fromtimestamp(t_ms // 1000, load_zone(s.timezone))
        found = next(_cronsim(s.cron, start))
        return int(found.timestamp()) * 1000
    except (StopIteration, ValueError, OverflowError, OSError):  # none, or a time datetime cannot hold
        raise NeverDue(s.cron) from None


def latest_at_or_before(s: ScheduleConfig, t_ms: int) -> Optional[int]:
    """The last slot at or before ``t_ms`` (None if none in the 50 years before)."""
    if s.every_ms is not None:
        return t_ms // s.every_ms * s.every_ms
    assert s.cron is not None
    # Reverse iteration yields slots strictly before its start: start one
    # second past the whole second at or before t_ms. No microseconds:
    # cronsim before 2.8 skipped a slot in reverse from a time with them.
    try:
        start = datetime.fromtimestamp(t_ms // 1000 + 1, load_zone(s.timezone))
        found = next(_cronsim(s.cron, start, reverse=True))
        return int(found.timestamp()) * 1000
    except (StopIteration, ValueError, OverflowError, OSError):
        return None


@dataclass(frozen=True)
class Fire:
    """One message to publish: the slot it stands for, and whether it stands
    for missed slots too (catch_up)."""

    slot_ms: int
    catch_up: bool = False


def due(s: ScheduleConfig, base_ms: int, now_ms: int, most: int = 100) -> tuple[list[Fire], Optional[int]]:
    """What to fire now for a schedule whose slots up to ``base_ms`` are
    settled (fired, skipped, or before it was declared), and the first slot
    after those (None: never; at or before now_ms when ``most`` cut the list,
    so the caller comes back at once).

    Slots later than now_ms - grace fire, each, late; earlier ones are
    missed: one Fire for the latest of them with catch_up, none without."""
    # Settled 60 years back at most (past cronsim's 50-year search, and within what datetime holds).
    base_ms = max(base_ms, now_ms - 60 * 365 * 86_400_000)
    try:
        first = next_after(s, base_ms)
    except NeverDue:
        return [], None
    if first > now_ms:
        return [], first
    fires: list[Fire] = []
    start = base_ms
    cutoff = now_ms - s.grace_ms
    if first <= cutoff:
        missed = latest_at_or_before(s, cutoff)
        if missed is not None and missed > base_ms:
            start = missed
            if s.catch_up:
                fires.append(Fire(missed, catch_up=True))
    try:
        slot: Optional[int] = next_after(s, start)
        while slot is not None and slot <= now_ms and len(fires) < most:
            fires.append(Fire(slot))
            slot = next_after(s, slot)
    except NeverDue:
        slot = None
    return fires, slot


def fire_time_text(slot_ms: int) -> str:
    """A slot as the ``smqsup-fire-time`` header gives it: ISO 8601, UTC, ms."""
    return datetime.fromtimestamp(slot_ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def fire_headers(s: ScheduleConfig, slot_ms: int, catch_up: bool) -> dict[str, Any]:
    """The headers of the message ``s`` fires for ``slot_ms``: its own and smqsup's."""
    return {**(s.headers or {}), HEADER_SCHEDULE: s.name, HEADER_FIRE_TIME: fire_time_text(slot_ms),
            **({HEADER_CATCH_UP: True} if catch_up else {})}


def largest_message_bytes(s: ScheduleConfig) -> int:
    """The payload size of the largest message ``s`` fires, as max_message_size measures it: a catch-up
    one, with an id as long as ids.new_id's and a creation time as long as the envelope writes."""
    writer = message.EnvelopeWriter(s.queue, fire_headers(s, 0, True), _INT64, created_at=9_999_999_999.999999)
    return len(writer.payload("0" * 26, s.body))
