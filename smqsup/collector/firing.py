"""Firing schedules: per queue, the process elected the queue's garbage
collector (gc.py) fires the queue's schedules, so that whatever number of
supervisors declare a schedule, one process fires it.

    look(queue), when a slot is due or at least every SCHEDULE_POLL_S: a
    round through the queue's definitions hash, SCHEDULE_LOOK_BUDGET_S of
    it per look (the supervisor's loop, its heartbeats, runs between looks):
        schedule_store.scan       HSCAN: the next SCHEDULE_BATCH definitions
        schedule_store.read_states TIME, then their states, paused flags and
                                  live declarations (replies bounded whatever
                                  the keys hold)
        checks without parsing    paused, never declared, undeclared, state
                                  ahead of the Redis clock: not fired
        schedule_store.due        per schedule: the slots to fire now, from
                                  the Redis clock (late ones within grace
                                  each; missed ones once with catch_up)
        schedule_fire.lua         per slot: lock token, definition digest,
                                  paused, a live declaration, slot after the
                                  last fire and not after now, then LPUSH

Exactly once per slot rests on the script alone (its compare-and-set of
last_fire_ms in the same step as the push), not on this process: a deposed
leader is refused by the token, a retry or a second leader finds the slot
settled. What this process decides is only when to look and what to ask.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Optional, cast

from smqsup import defaults, framing, message
from smqsup.config import schedule
from smqsup.config.model import Config
from smqsup.errors import ConfigError, MessageError, NotLeader, NotReplicated
from smqsup.ids import new_id
from smqsup.logs import Lasting
from smqsup.store.broker import Broker
from smqsup.store.ops import schedules as schedule_store
from smqsup.store.scripts import Lock
from smqsup.store.scripts import schedule_calls as calls

log = logging.getLogger(__name__)

#: A fire later than this (its slot to its publish, Redis clock) is logged at INFO, in ms.
_LATE_NOTED_MS = 1000


@dataclass
class _Round:
    """How far one queue's round through its definitions hash has gone."""

    cursor: int = 0  # HSCAN's: 0 once begun means the hash has been gone through
    begun: bool = False
    todo: deque[tuple[str, bytes]] = field(default_factory=deque)  # scanned, not looked at yet
    now_ms: int = 0  # the Redis clock at the latest batch
    next_ms: Optional[int] = None  # the earliest next slot the round has seen


class Firing:
    """The schedules part of one process's collector. Not thread-safe."""

    def __init__(self, broker: Broker, cfg: Config) -> None:
        self.broker = broker
        self.cfg = cfg
        self._trouble = Lasting(log, repeat_s=defaults.COLLECTOR_TROUBLE_REPEAT_S)
        self._ahead = Lasting(log)  # states ahead of the Redis clock: said once per state
        self._rounds: dict[str, _Round] = {}
        self._tick_deadline = float("inf")  # monotonic: begin_tick's

    def begin_tick(self) -> None:
        """A collector tick begins: the looks until the next one share
        SCHEDULE_TICK_BUDGET_S, whatever the number of queues."""
        self._tick_deadline = time.monotonic() + defaults.SCHEDULE_TICK_BUDGET_S

    def look(self, queue: str, lock: Lock) -> float:
        """Go on with ``queue``'s round through its schedules, firing what is
        due, for about SCHEDULE_LOOK_BUDGET_S; seconds until the next look (0:
        the round goes on at the next tick, or more is due). Raises NotLeader
        when the lock is lost (the next look starts a new round), and
        BrokerError as Redis does (the collector's _step reports it; the next
        look goes on from there, past a schedule whose firing failed)."""
        r = self._rounds.setdefault(queue, _Round())
        deadline = min(time.monotonic() + defaults.SCHEDULE_LOOK_BUDGET_S, self._tick_deadline)
        try:
            while time.monotonic() < deadline:
                if r.todo:
                    self._batch(r, queue, lock, deadline)
                elif r.begun and r.cursor == 0:
                    return self._end(queue)
                else:
                    r.cursor, found = self.broker.schedules.scan(queue, r.cursor, defaults.SCHEDULE_BATCH)
                    r.todo.extend(found)
                    r.begun = True
        except NotLeader:
            self.forget(queue)
            raise
        return 0.0

    def forget(self, queue: str) -> None:
        """Drop ``queue``'s round: the lock changed hands, what it read is stale."""
        self._rounds.pop(queue, None)

    def _batch(self, r: _Round, queue: str, lock: Lock, deadline: float) -> None:
        """Look at the next SCHEDULE_BATCH scanned schedules until ``deadline``
        (the others wait for the next look, their states read again then)."""
        r.now_ms, stored = self.broker.schedules.read_states(queue, list(islice(r.todo, defaults.SCHEDULE_BATCH)))
        for st in stored:
            # Off the list before it is fired: one whose firing fails costs itself, not the round.
            r.todo.popleft()
            nxt = self._one(st, r.now_ms, lock)
            if nxt is not None:
                r.next_ms = nxt if r.next_ms is None else min(r.next_ms, nxt)
            if time.monotonic() >= deadline:
                return

    def _end(self, queue: str) -> float:
        """The round is over: seconds until the next one, at the earliest
        next slot it saw (by the Redis clock) or SCHEDULE_POLL_S."""
        r = self._rounds.pop(queue)
        wait_ms = defaults.SCHEDULE_POLL_S * 1000
        if r.next_ms is not None:
            # One ms past the slot: the look must find it due by the Redis clock.
            wait_ms = min(wait_ms, r.next_ms - r.now_ms + 1)
        return max(0.0, wait_ms / 1000)

    def _one(self, st: schedule_store.Stored, now_ms: int, lock: Lock) -> Optional[int]:
        """Fire the due slots of one schedule; its next slot (None: look at the next poll)."""
        base = st.base_ms()
        # What needs no parse first: thousands of paused or undeclared
        # definitions cost a few µs each per round, whatever they hold.
        if st.paused or base is None or not st.declarers or self._is_ahead(st, base, now_ms):
            return None
        key = (st.queue, st.name)
        try:
            s = schedule_store.parsed(st.name, st.definition, st.queue)
        except ConfigError as exc:
            self._trouble.report(key, str(exc), "queue %s: schedule %s not fired: %s", st.queue, st.name, exc)
            return None
        self._trouble.clear(key, "queue %s: schedule %s can be fired again", st.queue, st.name)
        digest = hashlib.sha1(st.definition).hexdigest()
        fires, nxt = schedule_store.due(s, digest, base, now_ms)
        for f in fires:
            try:
                outcome = self._fire(s, digest, f, lock)
            except MessageError as exc:  # the body outgrew max_message_size
                self._trouble.report((*key, "message"), str(exc), "queue %s: schedule %s not fired: %s",
                                     st.queue, st.name, exc)
                return None
            if outcome not in (calls.FIRED, calls.SETTLED):
                return None  # paused, withdrawn or changed meanwhile: read again at the next poll
        return now_ms if fires and nxt is not None and nxt <= now_ms else nxt

    def _is_ahead(self, st: schedule_store.Stored, base: int, now_ms: int) -> bool:
        """Whether ``st``'s state lies further ahead of the Redis clock than
        SCHEDULE_AHEAD_MS (no slot fires until the clock gets there): said
        once per state, with the command that settles it up to now."""
        key = (st.queue, st.name)
        if base - now_ms <= defaults.SCHEDULE_AHEAD_MS:
            self._ahead.clear(key, "queue %s: schedule %s is no longer ahead of the Redis clock", st.queue, st.name)
            return False
        self._ahead.report(key, str(base), "queue %s: schedule %s not fired: %s", st.queue, st.name,
                           schedule_store.ahead_text(st.name, base - now_ms))
        return True

    def _fire(self, s: schedule.ScheduleConfig, digest: str, f: schedule.Fire, lock: Lock) -> int:
        mid = new_id()
        writer = message.EnvelopeWriter(s.queue, schedule.fire_headers(s, f.slot_ms, f.catch_up),
                                        self.cfg.max_message_size_bytes)
        payload = writer.payload(mid, s.body)
        q = self.cfg.queues.get(s.queue)  # (always there: a schedule names a queue of its file)
        frame = framing.new_frame(payload, q.result_ttl_s, q.events_cap) if q else framing.frame(payload)
        try:
            outcome, now_ms = self.broker.schedules.fire(s.queue, s.name, digest, f.slot_ms, frame, mid, lock)
        except NotReplicated as exc:  # fired on the master: the slot is done whatever happens next
            outcome, now_ms = cast(tuple[int, int], exc.result)
            log.warning("queue %s: schedule %s fired (message %s), but %s", s.queue, s.name, mid, exc)
        if outcome == calls.FIRED:
            late_ms = now_ms - f.slot_ms
            level = logging.INFO if f.catch_up or late_ms > _LATE_NOTED_MS else logging.DEBUG
            log.log(level, "queue %s: schedule %s fired for %s%s, %d ms late (message %s)", s.queue, s.name,
                    schedule.fire_time_text(f.slot_ms), " (catching up missed slots)" if f.catch_up else "",
                    late_ms, mid)
        return outcome
