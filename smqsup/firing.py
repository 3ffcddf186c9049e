"""Firing schedules: per queue, the process elected the queue's garbage
collector (gc.py) fires the queue's schedules, so that whatever number of
supervisors declare a schedule, one process fires it.

    look(queue), when a slot is due or at least every SCHEDULE_POLL_S:
        schedule_store.read       TIME, definitions, states, paused flags,
                                  declarations (two round trips)
        schedule.due              per schedule: the slots to fire now, from
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
from typing import Optional, cast

from smqsup import defaults, message, schedule, schedule_store
from smqsup.broker import Broker
from smqsup.config import Config
from smqsup.errors import ConfigError, MessageError, NotReplicated
from smqsup.logs import Lasting
from smqsup.scripts import Lock
from smqsup.scripts import schedules as calls

log = logging.getLogger(__name__)

#: A fire later than this (its slot to its publish, Redis clock) is logged at INFO, in ms.
_LATE_NOTED_MS = 1000


class Firing:
    """The schedules part of one process's collector. Not thread-safe."""

    def __init__(self, broker: Broker, cfg: Config) -> None:
        self.broker = broker
        self.cfg = cfg
        self._trouble = Lasting(log, repeat_s=defaults.COLLECTOR_TROUBLE_REPEAT_S)

    def look(self, queue: str, lock: Lock) -> float:
        """Fire what is due of ``queue``'s schedules; seconds until the next
        look (0: more is due). Raises NotLeader when the lock is lost, and
        BrokerError as Redis does (the collector's _step reports it)."""
        now_ms, stored = schedule_store.read(self.broker, [queue])
        wait_ms = defaults.SCHEDULE_POLL_S * 1000
        for st in stored:
            nxt = self._one(st, now_ms, lock)
            if nxt is not None:
                # One ms past the slot: the look must find it due by the Redis clock.
                wait_ms = min(wait_ms, nxt - now_ms + 1)
        return max(0.0, wait_ms / 1000)

    def _one(self, st: schedule_store.Stored, now_ms: int, lock: Lock) -> Optional[int]:
        """Fire the due slots of one schedule; its next slot (None: look at the next poll)."""
        key = (st.queue, st.name)
        try:
            s = schedule_store.parsed(st.name, st.definition, st.queue)
        except ConfigError as exc:
            self._trouble.report(key, str(exc), "queue %s: schedule %s not fired: %s", st.queue, st.name, exc)
            return None
        self._trouble.clear(key, "queue %s: schedule %s can be fired again", st.queue, st.name)
        base = st.base_ms()
        if st.paused is not None or base is None or not st.live_declarers(now_ms):
            return None
        fires, nxt = schedule.due(s, base, now_ms)
        digest = hashlib.sha1(st.definition).hexdigest()
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

    def _fire(self, s: schedule.ScheduleConfig, digest: str, f: schedule.Fire, lock: Lock) -> int:
        headers = {**(s.headers or {}), schedule.HEADER_SCHEDULE: s.name,
                   schedule.HEADER_FIRE_TIME: schedule.fire_time_text(f.slot_ms)}
        if f.catch_up:
            headers[schedule.HEADER_CATCH_UP] = True
        mid = message.new_id()
        payload = message.EnvelopeWriter(s.queue, headers, self.cfg.max_message_size_bytes).payload(mid, s.body)
        try:
            outcome, now_ms = schedule_store.fire(self.broker, s.queue, s.name, digest, f.slot_ms,
                                                  message.frame(payload), mid, lock)
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
