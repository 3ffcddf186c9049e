"""Schedules in Redis: what supervisors declare, what the elected collector
fires, what operators pause, and what status, the web UI and /metrics read
(keys.py has the keys; scripts/schedule_*.lua the atomic steps). The class
Schedules (``broker.schedules``) does every read and write; the functions
beside it are pure: a stored definition parsed back (from_json, parsed), its
row for people (row), its due slots (due).

Every reader here treats Redis as anyone's to write: a field that is not a
time is None, a definition that does not validate is shown with its error and
never fired, and a schedule name that could not form a key is skipped. Each
read is bounded whatever a key holds (HMGET of a state hash, EXISTS of a
paused flag, ZCOUNT of a declarers set, a definition's length before JSON).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, cast

from smqsup import defaults
from smqsup.config import names, schedule
from smqsup.errors import ConfigError
from smqsup.keys import queues_set
from smqsup.store import scripts
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import ms_of
from smqsup.store.scripts import schedule_calls as calls
from smqsup.store.sync.session import Session

#: The state fields the readers use.
_STATE_FIELDS = (b"since_ms", b"last_fire_ms", b"fired_at_ms", b"fires")
#: How long a declaration may hold at most, in ms (includes/schedule.lua's DAY_MS).
_DAY_MS = 86_400_000
#: The longest definition to_json writes, in bytes: body and headers of at
#: most DEFINITION_MAX_BYTES as UTF-8 JSON, each byte 6 ASCII characters at
#: most (\u0001), and the other fields.
_DEFINITION_MAX_BYTES = 6 * schedule.DEFINITION_MAX_BYTES + 4096
_INT64 = 2**63


def ms_value(value: Any) -> Optional[int]:
    """A stored time in ms, or None for anything else (as includes/schedule.lua's ms_field)."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    try:
        number = float(text)
    except (TypeError, ValueError):
        return None
    return int(number) if -1e15 < number < 1e15 else None  # NaN fails both


def valid_name(name: str) -> bool:
    """Whether ``name`` is a schedule (or queue) name that can form a key."""
    try:
        names.queue_or_namespace(name, "", "")
    except ConfigError:
        return False
    return True


@dataclass(frozen=True)
class Stored:
    """One schedule as Redis holds it, unchecked."""

    queue: str
    name: str
    definition: bytes
    state: dict[bytes, bytes]  # those of _STATE_FIELDS it holds
    paused: bool  # its paused flag exists (as schedule_fire.lua's EXISTS sees it)
    declarers: int  # declarations that held when read (as includes/schedule.lua's live_declarers)

    def base_ms(self) -> Optional[int]:
        """The slot up to which everything is settled: max(last fire, since);
        None without a since_ms (a declaration restores it)."""
        since = ms_value(self.state.get(b"since_ms"))
        if since is None:
            return None
        last = ms_value(self.state.get(b"last_fire_ms"))
        return since if last is None else max(since, last)


def ahead_text(name: str, ahead_ms: int) -> str:
    """Why a schedule whose state lies ``ahead_ms`` ahead of the Redis clock
    fires nothing, and the command that ends it."""
    return (f"its state (since_ms or last_fire_ms) is {ahead_ms / 86_400_000:.0f} days ahead of the Redis clock "
            f"(written by a clock that was ahead): no slot fires until the clock gets there; "
            f"`smqsup schedules reset {name}` settles it up to now")


# --- what status, the web UI and /metrics show --------------------------------------------


def row(st: Stored, now_ms: int, max_message_size_bytes: int = defaults.MAX_MESSAGE_SIZE_BYTES) -> dict[str, Any]:
    """One schedule for people and programs; times in unix seconds (None:
    unknown), ``error`` the reason it is not fired: its definition cannot be
    used, its message would be over ``max_message_size_bytes``, or its state
    lies ahead of the Redis clock."""
    out: dict[str, Any] = {"name": st.name, "queue": st.queue, "cron": None, "every_s": None, "timezone": None,
                           "catch_up": None, "paused": st.paused, "error": None,
                           "last_fire": _s(ms_value(st.state.get(b"last_fire_ms"))),
                           "fired_at": _s(ms_value(st.state.get(b"fired_at_ms"))),
                           "fires": ms_value(st.state.get(b"fires")), "next_fire": None,
                           "declarers": st.declarers}
    try:
        s = parsed(st.name, st.definition, st.queue)
    except ConfigError as exc:
        out["error"] = str(exc)
        return out
    out.update(cron=s.cron, every_s=None if s.every_ms is None else s.every_ms / 1000, timezone=s.timezone,
               catch_up=s.catch_up)
    base = st.base_ms()
    size = schedule.largest_message_bytes(s)
    if size > max_message_size_bytes:
        out["error"] = (f"its message (body, headers and envelope) would be {size} bytes, over max_message_size "
                        f"({max_message_size_bytes} bytes): never fired")
    elif base is not None and base - now_ms > defaults.SCHEDULE_AHEAD_MS:
        out["error"] = ahead_text(st.name, base - now_ms)
    if base is not None:
        fires, nxt = due(s, hashlib.sha1(st.definition).hexdigest(), base, now_ms, most=1)
        out["next_fire"] = _s(fires[0].slot_ms if fires else nxt)
    return out


#: Parsed definitions by (name, SHA-1 of the definition, queue), oldest
#: first: keyed by digest, so that the cache holds at most PARSED_KEPT
#: configs, never the (possibly huge, hostile) bytes they were read from.
_parsed: dict[tuple[str, str, str], schedule.ScheduleConfig] = {}
_parsed_lock = threading.Lock()  # the web UI reads in a thread pool
PARSED_KEPT = 1024


def parsed(name: str, definition: bytes, queue: str) -> schedule.ScheduleConfig:
    """from_json, remembered: every look and every snapshot reads the same
    few definitions (a refused one raises again each time)."""
    key = (name, hashlib.sha1(definition).hexdigest(), queue)
    with _parsed_lock:
        found = _parsed.get(key)
    if found is not None:
        return found
    s = from_json(name, definition, queue)
    with _parsed_lock:
        if len(_parsed) >= PARSED_KEPT:
            del _parsed[next(iter(_parsed))]  # the oldest
        _parsed[key] = s
    return s


def from_json(name: str, raw: "bytes | str", queue: str) -> schedule.ScheduleConfig:
    """A definition read back from Redis (anyone may have written anything
    there): validated like the file; ConfigError naming the key otherwise."""
    where = f"redis definition of schedule {name!r} on queue {queue!r}"
    if len(raw) > _DEFINITION_MAX_BYTES:  # refused unread: decoding megabytes at every look costs the loop
        raise ConfigError(f"{where}: {len(raw)} bytes, more than any definition ({_DEFINITION_MAX_BYTES})")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise ConfigError(f"{where}: not JSON") from None
    if not isinstance(data, dict) or data.get("v") != 1:
        raise ConfigError(f"{where}: not a version 1 definition")
    fields: dict[str, object] = {k: data.get(k) for k in ("queue", "cron", "timezone", "body", "headers", "catch_up")}
    for source, target in (("every_ms", "every"), ("grace_ms", "grace")):
        ms = data.get(source)
        if ms is not None:
            if isinstance(ms, bool) or not isinstance(ms, int) or not 0 < ms < _INT64:
                raise ConfigError(f"{where}: {source}: not a positive integer")
            fields[target] = f"{ms}ms"
    if fields.get("every") is not None and fields.get("timezone") == "UTC":
        fields["timezone"] = None
    return schedule.one(name, fields, {queue: None}, where, where="schedule")


#: First slots after a base, by (definition digest, base): see due().
_first: dict[tuple[str, int], Optional[int]] = {}
_first_lock = threading.Lock()  # the web UI reads in a thread pool


def due(s: schedule.ScheduleConfig, digest: str, base_ms: int, now_ms: int, most: int = 100
        ) -> tuple[list[schedule.Fire], Optional[int]]:
    """schedule.due, with the first slot after ``base_ms`` searched once per
    (definition digest, base) in this process: most looks find nothing due
    and ask only that, and a rare cron's search (a Monday 29 February: years
    of days to walk) would cost ms at every one."""
    first = _first_after(s, digest, base_ms)
    if first is not None and first > now_ms:
        return [], first
    return schedule.due(s, base_ms, now_ms, most)


def _first_after(s: schedule.ScheduleConfig, digest: str, base_ms: int) -> Optional[int]:
    with _first_lock:
        if (digest, base_ms) in _first:
            return _first[(digest, base_ms)]
    try:
        first: Optional[int] = schedule.next_after(s, base_ms)
    except schedule.NeverDue:
        first = None  # none, or a base no datetime holds: schedule.due decides
    with _first_lock:
        if len(_first) >= defaults.SCHEDULE_SLOTS_KEPT:
            del _first[next(iter(_first))]  # the oldest
        _first[(digest, base_ms)] = first
    return first


def _s(ms: Optional[int]) -> Optional[float]:
    return None if ms is None else ms / 1000




def _text(value: "bytes | str") -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class Schedules:
    """Schedules in Redis, as the module's docstring says: what supervisors
    declare, the collector fires, operators pause and everyone reads."""

    def __init__(self, session: Session) -> None:
        self._session = session

    # --- what status, the web UI and /metrics read ---------------------------------------

    def read(self, queues: Sequence[str]) -> tuple[int, list[Stored]]:
        """The Redis clock (ms) and every schedule stored for ``queues``: two
        round trips whatever their number. A key of the wrong type reads as empty."""
        session = self._session
        with wrapped("read schedules"):
            now, defs = session.with_clock(lambda pipe: [pipe.hgetall(session.keys(q).schedules) for q in queues],
                                        raise_on_error=False)
            if isinstance(now, Exception):
                raise now
            found: list[tuple[str, str, bytes]] = []
            for queue, reply in zip(queues, defs):
                if isinstance(reply, dict):
                    found += [(queue, n, v) for f, v in sorted(reply.items()) if valid_name(n := _text(f))]
            return ms_of(now), self._states(ms_of(now), found)

    def rows(self, queues: Sequence[str],
             max_message_size_bytes: int = defaults.MAX_MESSAGE_SIZE_BYTES) -> list[dict[str, Any]]:
        """Every schedule stored for ``queues``, as ``row`` gives them, by queue and name."""
        now_ms, stored = self.read(queues)
        return [row(st, now_ms, max_message_size_bytes) for st in stored]

    def scan(self, queue: str, cursor: int, count: int) -> tuple[int, list[tuple[str, bytes]]]:
        """One HSCAN step over ``queue``'s definitions from ``cursor``: the next
        cursor (0: the whole hash has been gone through) and about ``count``
        (name, definition) pairs, those whose name can form a key. BrokerError
        for a key of the wrong type."""
        with wrapped(f"read the schedules of {queue!r}"):
            nxt, found = self._session.client.hscan(self._session.keys(queue).schedules, cursor, count=count)
        return int(nxt), [(n, v) for f, v in found.items() if valid_name(n := _text(f))]

    def read_states(self, queue: str, items: Sequence[tuple[str, bytes]]) -> tuple[int, list[Stored]]:
        """The Redis clock (ms) and ``queue``'s schedules ``items`` (name,
        definition) as stored: two round trips (the clock first, as the live
        declarations are counted against it)."""
        with wrapped(f"read the schedules of {queue!r}"):
            now_ms = ms_of(self._session.client.time())
            return now_ms, self._states(now_ms, [(queue, name, definition) for name, definition in items])

    def _states(self, now_ms: int, found: Sequence[tuple[str, str, bytes]]) -> list[Stored]:
        """Each (queue, name, definition) of ``found`` with its state, paused flag
        and live declarations, in one round trip of replies bounded whatever the
        keys hold; a key of the wrong type reads as empty."""
        pipe = self._session.client.pipeline(transaction=False)
        for queue, name, _ in found:
            k = self._session.keys(queue)
            pipe.hmget(k.schedule(name), _STATE_FIELDS)
            pipe.exists(k.schedule_paused(name))
            pipe.zcount(k.schedule_declarers(name), f"({now_ms}", now_ms + _DAY_MS)
        replies = pipe.execute(raise_on_error=False) if found else []
        out = []
        for i, (queue, name, definition) in enumerate(found):
            state, paused, declarers = replies[3 * i:3 * i + 3]
            fields = zip(_STATE_FIELDS, state) if isinstance(state, list) else ()
            out.append(Stored(queue, name, definition, {f: v for f, v in fields if isinstance(v, bytes)},
                              paused == 1, declarers if isinstance(declarers, int) else 0))
        return out

    def stored_queues(self, queues: Sequence[str], name: str) -> list[str]:
        """The queues among ``queues`` that hold a definition of schedule ``name``."""
        with wrapped(f"find schedule {name!r}"):
            pipe = self._session.client.pipeline(transaction=False)
            for queue in queues:
                pipe.hexists(self._session.keys(queue).schedules, name)
            found = pipe.execute(raise_on_error=False)
        return [q for q, there in zip(queues, found) if there is True or there == 1]

    def paused_info(self, queue: str, name: str) -> dict[str, Any]:
        """The paused flag's fields as stored ({} when absent or unreadable)."""
        key = self._session.keys(queue).schedule_paused(name)
        with wrapped(f"read the paused flag of schedule {name!r}"):
            # Its first 4 KB: the flag pause() writes is a few dozen bytes, one anyone wrote may be huge.
            raw = cast(Optional[bytes], self._session.client.getrange(key, 0, 4095))
        try:
            info = json.loads(raw) if raw is not None else {}
        except (ValueError, RecursionError):
            return {}
        return info if isinstance(info, dict) else {}

    # --- what supervisors and the collector do --------------------------------------------

    def upsert(self, s: schedule.ScheduleConfig, declarer: str, hold_ms: int) -> int:
        """Store ``s``'s definition and declare ``declarer``: SAME, NEW or REPLACED."""
        session = self._session
        with wrapped(f"declare schedule {s.name!r}"):
            # Known to `smqsup status` and `schedules --url` before any consumer of it registers.
            session.client.sadd(queues_set(session.namespace), s.queue)
            return calls.upsert(session.keys(s.queue), s.name, s.to_json(), declarer, hold_ms).run(session.client)

    def declare(self, queue: str, items: Sequence[schedule.ScheduleConfig], declarer: str,
                hold_ms: int) -> list[int]:
        """Renew ``declarer``'s declarations of ``items`` (all on ``queue``): per
        item SAME, MISSING, DIFFERS or REFUSED."""
        with wrapped(f"declare schedules of {queue!r}"):
            return calls.declare(self._session.keys(queue), [(s.name, s.digest) for s in items], declarer,
                                 hold_ms).run(self._session.client)

    def undeclare(self, s: schedule.ScheduleConfig, declarer: str, *, forget: bool) -> bool:
        """Withdraw ``declarer``'s declaration (and with ``forget`` delete the
        schedule if nobody else declares it: True then)."""
        with wrapped(f"withdraw schedule {s.name!r}"):
            return calls.undeclare(self._session.keys(s.queue), s.name, declarer, forget=forget).run(self._session.client)

    def fire(self, queue: str, name: str, digest: str, slot_ms: int, frame: bytes, message_id: str,
             lock: scripts.Lock) -> tuple[int, int]:
        """schedule_fire.lua: (outcome, Redis now in ms). NotLeader when the lock
        is not ours any more."""
        session = self._session
        with wrapped(f"fire schedule {name!r} on {queue!r}"):
            return session.run_replicated(queue, calls.fire(session.keys(queue), name, digest, slot_ms, frame,
                                                         message_id, lock, session.stats))

    # --- what operators do ------------------------------------------------------------------

    def pause(self, queue: str, name: str, by: str) -> bool:
        """Pause the schedule on every host (its slots are skipped); True if it was not paused."""
        session = self._session
        k = session.keys(queue)
        with wrapped(f"pause schedule {name!r}"):
            info = json.dumps({"at_ms": ms_of(session.client.time()), "by": by}, separators=(",", ":"))
            return bool(session.client.set(k.schedule_paused(name), info, nx=True))

    def resume(self, queue: str, name: str) -> bool:
        """Resume it from now on (the slots skipped while paused are not caught
        up); True if it was paused."""
        with wrapped(f"resume schedule {name!r}"):
            return calls.resume(self._session.keys(queue), name).run(self._session.client)

    def reset(self, queue: str, name: str) -> tuple[bool, int, int]:
        """Settle the schedule up to now (schedule_reset.lua): its state may have
        been written by a clock that was ahead. (Whether a definition of it is
        stored, Redis now in ms, how far its state was ahead of now in ms.)"""
        with wrapped(f"reset schedule {name!r}"):
            return calls.reset(self._session.keys(queue), name).run(self._session.client)
