"""Schedules in Redis: what supervisors declare, what the elected collector
fires, what operators pause, and what status, the web UI and /metrics read
(keys.py has the keys; scripts/schedule_*.lua the atomic steps).

Every reader here treats Redis as anyone's to write: a field that is not a
time is None, a definition that does not validate is shown with its error and
never fired, and a schedule name that could not form a key is skipped.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, cast

from smqsup import schedule, scripts, validate
from smqsup.broker import Broker
from smqsup.connection import wrapped
from smqsup.errors import ConfigError
from smqsup.keys import queues_set
from smqsup.readings import ms_of, with_clock
from smqsup.scripts import schedules as calls


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
        validate.queue_or_namespace(name, "", "")
    except ConfigError:
        return False
    return True


@dataclass(frozen=True)
class Stored:
    """One schedule as Redis holds it, unchecked."""

    queue: str
    name: str
    definition: bytes
    state: dict[bytes, bytes]
    paused: Optional[bytes]  # the flag's JSON, None when not paused
    declarers: list[tuple[str, float]]  # declarer id, until when (ms, Redis clock)

    def live_declarers(self, now_ms: int) -> list[str]:
        """The declarations that hold now (as includes/schedule.lua counts them)."""
        return [d for d, until in self.declarers if now_ms < until <= now_ms + 86_400_000]

    def base_ms(self) -> Optional[int]:
        """The slot up to which everything is settled: max(last fire, since);
        None without a since_ms (a declaration restores it)."""
        since = ms_value(self.state.get(b"since_ms"))
        if since is None:
            return None
        last = ms_value(self.state.get(b"last_fire_ms"))
        return since if last is None else max(since, last)


def read(broker: Broker, queues: Sequence[str]) -> tuple[int, list[Stored]]:
    """The Redis clock (ms) and every schedule stored for ``queues``: two
    round trips whatever their number. A key of the wrong type reads as empty."""
    with wrapped("read schedules"):
        now, defs = with_clock(broker, lambda pipe: [pipe.hgetall(broker.keys(q).schedules) for q in queues],
                               raise_on_error=False)
        if isinstance(now, Exception):
            raise now
        found: list[tuple[str, str, bytes]] = []
        for queue, reply in zip(queues, defs):
            if isinstance(reply, dict):
                found += [(queue, n, v) for f, v in sorted(reply.items()) if valid_name(n := _text(f))]
        pipe = broker.client.pipeline(transaction=False)
        for queue, name, _ in found:
            k = broker.keys(queue)
            pipe.hgetall(k.schedule(name))
            pipe.get(k.schedule_paused(name))
            pipe.zrange(k.schedule_declarers(name), 0, -1, withscores=True)
        replies = pipe.execute(raise_on_error=False) if found else []
    out = []
    for i, (queue, name, definition) in enumerate(found):
        state, paused, declarers = replies[3 * i:3 * i + 3]
        out.append(Stored(queue, name, definition, state if isinstance(state, dict) else {},
                          paused if isinstance(paused, bytes) else None,
                          [(_text(d), float(s)) for d, s in declarers] if isinstance(declarers, list) else []))
    return ms_of(now), out


def _text(value: "bytes | str") -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# --- what supervisors do ---------------------------------------------------------------


def upsert(broker: Broker, s: schedule.ScheduleConfig, declarer: str, hold_ms: int) -> int:
    """Store ``s``'s definition and declare ``declarer``: SAME, NEW or REPLACED."""
    with wrapped(f"declare schedule {s.name!r}"):
        # Known to `smqsup status` and `schedules --url` before any consumer of it registers.
        broker.client.sadd(queues_set(broker.namespace), s.queue)
        return calls.upsert(broker.keys(s.queue), s.name, s.to_json(), declarer, hold_ms).run(broker.client)


def declare(broker: Broker, queue: str, items: Sequence[schedule.ScheduleConfig], declarer: str,
            hold_ms: int) -> list[int]:
    """Renew ``declarer``'s declarations of ``items`` (all on ``queue``): per
    item SAME, MISSING, DIFFERS or REFUSED."""
    with wrapped(f"declare schedules of {queue!r}"):
        return calls.declare(broker.keys(queue), [(s.name, s.digest) for s in items], declarer,
                             hold_ms).run(broker.client)


def undeclare(broker: Broker, s: schedule.ScheduleConfig, declarer: str, *, forget: bool) -> bool:
    """Withdraw ``declarer``'s declaration (and with ``forget`` delete the
    schedule if nobody else declares it: True then)."""
    with wrapped(f"withdraw schedule {s.name!r}"):
        return calls.undeclare(broker.keys(s.queue), s.name, declarer, forget=forget).run(broker.client)


def fire(broker: Broker, queue: str, name: str, digest: str, slot_ms: int, frame: bytes, message_id: str,
         lock: scripts.Lock) -> tuple[int, int]:
    """schedule_fire.lua: (outcome, Redis now in ms). NotLeader when the lock
    is not ours any more."""
    with wrapped(f"fire schedule {name!r} on {queue!r}"):
        return broker.run_replicated(queue, calls.fire(broker.keys(queue), name, digest, slot_ms, frame,
                                                       message_id, lock, broker.stats))


# --- what operators do --------------------------------------------------------------------


def pause(broker: Broker, queue: str, name: str, by: str) -> bool:
    """Pause the schedule on every host (its slots are skipped); True if it was not paused."""
    k = broker.keys(queue)
    with wrapped(f"pause schedule {name!r}"):
        info = json.dumps({"at_ms": ms_of(broker.client.time()), "by": by}, separators=(",", ":"))
        return bool(broker.client.set(k.schedule_paused(name), info, nx=True))


def resume(broker: Broker, queue: str, name: str) -> bool:
    """Resume it from now on (the slots skipped while paused are not caught
    up); True if it was paused."""
    with wrapped(f"resume schedule {name!r}"):
        return calls.resume(broker.keys(queue), name).run(broker.client)


# --- what status, the web UI and /metrics show --------------------------------------------


def row(st: Stored, now_ms: int) -> dict[str, Any]:
    """One schedule for people and programs; times in unix seconds (None:
    unknown), ``error`` the reason its definition cannot be used (then it
    is not fired)."""
    out: dict[str, Any] = {"name": st.name, "queue": st.queue, "cron": None, "every_s": None, "timezone": None,
                           "catch_up": None, "paused": st.paused is not None, "error": None,
                           "last_fire": _s(ms_value(st.state.get(b"last_fire_ms"))),
                           "fired_at": _s(ms_value(st.state.get(b"fired_at_ms"))),
                           "fires": ms_value(st.state.get(b"fires")), "next_fire": None,
                           "declarers": len(st.live_declarers(now_ms))}
    try:
        s = parsed(st.name, st.definition, st.queue)
    except ConfigError as exc:
        out["error"] = str(exc)
        return out
    out.update(cron=s.cron, every_s=None if s.every_ms is None else s.every_ms / 1000, timezone=s.timezone,
               catch_up=s.catch_up)
    base = st.base_ms()
    if base is not None:
        fires, nxt = schedule.due(s, base, now_ms, most=1)
        out["next_fire"] = _s(fires[0].slot_ms if fires else nxt)
    return out


@functools.lru_cache(maxsize=1024)
def parsed(name: str, definition: bytes, queue: str) -> schedule.ScheduleConfig:
    """schedule.from_json, remembered: every look and every snapshot reads
    the same few definitions (a refused one raises again each time)."""
    return schedule.from_json(name, definition, queue)


def _s(ms: Optional[int]) -> Optional[float]:
    return None if ms is None else ms / 1000


def rows(broker: Broker, queues: Sequence[str]) -> list[dict[str, Any]]:
    """Every schedule stored for ``queues``, as ``row`` gives them, by queue and name."""
    now_ms, stored = read(broker, queues)
    return [row(st, now_ms) for st in stored]


def stored_queues(broker: Broker, queues: Sequence[str], name: str) -> list[str]:
    """The queues among ``queues`` that hold a definition of schedule ``name``."""
    with wrapped(f"find schedule {name!r}"):
        pipe = broker.client.pipeline(transaction=False)
        for queue in queues:
            pipe.hexists(broker.keys(queue).schedules, name)
        found = pipe.execute(raise_on_error=False)
    return [q for q, there in zip(queues, found) if there is True or there == 1]


def paused_info(broker: Broker, queue: str, name: str) -> dict[str, Any]:
    """The paused flag's fields as stored ({} when absent or unreadable)."""
    with wrapped(f"read the paused flag of schedule {name!r}"):
        raw = cast(Optional[bytes], broker.client.get(broker.keys(queue).schedule_paused(name)))
    try:
        info = json.loads(raw) if raw is not None else {}
    except (ValueError, RecursionError):
        return {}
    return info if isinstance(info, dict) else {}
