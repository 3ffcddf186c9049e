"""A supervisor's declarations of the schedules its config has: upserted in
Redis at its start and on SIGHUP, renewed every heartbeat_interval (each
holds heartbeat_timeout by the Redis clock), withdrawn at its clean exit.

Whichever process the queue's collector election picks fires a schedule,
its own config naming it or not, while some declaration of it holds: so a
schedule dropped from one supervisor's config goes on firing while another
still declares it, and stops once no config has it (its last declaration
withdrawn on SIGHUP, or lapsed after a SIGKILL).
"""

from __future__ import annotations

import logging
import os
import time

from smqsup.config.model import Config
from smqsup.config.schedule import ScheduleConfig
from smqsup.errors import BrokerError
from smqsup.logs import Lasting, warn_once
from smqsup.store.broker import Broker
from smqsup.store.scripts import schedule_calls as calls

log = logging.getLogger(__name__)


class Declarations:
    """Not thread-safe; one per supervisor."""

    def __init__(self, broker: Broker, cfg: Config, host: str, pid: int, trouble: Lasting) -> None:
        self.broker = broker
        self.cfg = cfg
        #: This supervisor in the declarers sets: host:pid:random (a pid is reused).
        self.id = f"{host}:{pid}:{os.urandom(3).hex()}"
        self._trouble = trouble
        self._to_upsert: set[str] = set(cfg.schedules)
        #: Schedules the config dropped (name, queue) -> its last definition: withdrawn, forgotten if nobody else declares them.
        self._to_withdraw: dict[tuple[str, str], ScheduleConfig] = {}
        self._next = 0.0

    @property
    def hold_ms(self) -> int:
        return int(self.cfg.heartbeat_timeout_s * 1000)

    def update(self, cfg: Config) -> None:
        """SIGHUP: upsert every schedule of the new config (the one reloaded
        last wins where configs differ) and withdraw the dropped ones, at once."""
        for name, old in self.cfg.schedules.items():
            new = cfg.schedules.get(name)
            if new is None or new.queue != old.queue:
                self._to_withdraw[(name, old.queue)] = old
        for name, new in cfg.schedules.items():
            self._to_withdraw.pop((name, new.queue), None)
        self._to_upsert = set(cfg.schedules)
        self.cfg = cfg
        self._next = 0.0

    def tick(self) -> None:
        """Every heartbeat_interval (and at once after start or SIGHUP): what
        is pending, then the renewals. Redis trouble leaves the rest for the
        next tick; one line while it lasts."""
        now = time.monotonic()
        if now < self._next or not (self.cfg.schedules or self._to_withdraw):
            return
        self._next = now + self.cfg.heartbeat_interval_s
        try:
            self._withdraw_dropped()
            self._upsert_pending()
            self._renew()
        except BrokerError as exc:
            self._trouble.report("schedules", "not declared", "schedules not declared: %s", exc)
            return
        self._trouble.clear("schedules", "schedules declared again")

    def _withdraw_dropped(self) -> None:
        for key, s in list(self._to_withdraw.items()):
            forgotten = self.broker.schedules.undeclare(s, self.id, forget=True)
            del self._to_withdraw[key]
            log.info("schedule %s on queue %s: dropped from this config; %s", s.name, s.queue,
                     "no supervisor declares it any more: it stops firing" if forgotten
                     else "it fires on while another supervisor declares it")

    def _upsert_pending(self) -> None:
        for name in sorted(self._to_upsert):
            s = self.cfg.schedules.get(name)
            if s is not None:
                outcome = self.broker.schedules.upsert(s, self.id, self.hold_ms)
                if outcome != calls.SAME:
                    log.info("schedule %s on queue %s (%s): definition %s", s.name, s.queue, s.when,
                             "stored" if outcome == calls.NEW else "replaced (its slots start from now)")
            self._to_upsert.discard(name)

    def _renew(self) -> None:
        by_queue: dict[str, list[ScheduleConfig]] = {}
        for s in self.cfg.schedules.values():
            by_queue.setdefault(s.queue, []).append(s)
        for queue, items in sorted(by_queue.items()):
            for s, status in zip(items, self.broker.schedules.declare(queue, items, self.id, self.hold_ms)):
                if status == calls.MISSING:
                    self._to_upsert.add(s.name)  # deleted under us: stored again at the next tick
                elif status == calls.DIFFERS:
                    warn_once(log, f"schedule differs:{queue}:{s.name}:{s.digest}", "schedule %s on queue %s: Redis "
                              "holds another definition than this supervisor's config (another supervisor's config "
                              "differs: the one started or reloaded last wins)", s.name, queue)
                elif status == calls.REFUSED:
                    warn_once(log, f"schedule refused:{queue}:{s.name}", "schedule %s on queue %s: a key of it holds "
                              "the wrong type; not declared until it is repaired", s.name, queue)

    def withdraw_all(self) -> None:
        """At a clean exit: withdraw every declaration (the schedules stay
        stored: another supervisor, or this one restarted, declares them)."""
        for s in self.cfg.schedules.values():
            try:
                self.broker.schedules.undeclare(s, self.id, forget=False)
            except BrokerError as exc:
                log.warning("schedule %s: declaration not withdrawn (%s); it lapses by itself", s.name, exc)
                return
