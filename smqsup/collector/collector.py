"""The garbage collector: per queue, one elected process across all
supervisors and hosts reclaims the messages of dead consumers and moves due
delayed messages to pending.

    every tick, for each queue:
        LeaderLock.step()        SET NX PX / renew at a third of the TTL
        if leader:
            stale.lua            consumers whose heartbeat is older than
                                 heartbeat_timeout (Redis clock), and
                                 registered consumers with no heartbeat
            reclaim_stale.lua    each one's list back to pending (one attempt,
                                 reason "consumer lost"), re-checking both the
                                 staleness and the lock token inside the script
            return_free.lua      messages found in retired consumers' lists,
                                 back free of cost (sweep_retired)
            promote.lua          due delayed messages, in batches until none
                                 is due
            firing.look          the queue's schedules: each due slot
                                 published once (schedule_fire.lua)
            stats.sample         once a second, one point of the queue's
                                 history (counters and sizes)
            workflows.drain_all  every OUTBOX_LOOK_S, the children of its
                                 ended messages no consumer told (it died)
            workflows.retry_parked  the outbox entries Redis refused, set
                                 aside (store/ops/parked.py), when due again
            workflows.repair_holds  children whose producer died before it
                                 told all their parents
            groups.repair        every GROUP_REPAIR_S, the groups' running
                                 counts recounted and lost turns given back

The promote look and the outbox look of every queue led, when due, go out
in one round trip for all of them (_rounds); a queue with more to do goes on
alone. It reads the registry, never the keyspace (no KEYS, no SCAN). Every script
that changes something checks the lock token in Redis, so a leader that was
paused past the TTL (SIGSTOP, a VM freeze) and deposed cannot act when it
resumes: its first refused script makes it step down.

Failures are kept as small as their cause. Redis unreachable stops every
queue for a second (and delays reclaims, see redis_trouble). Redis refusing
one step of one queue (a key of the wrong type, OOM, NOPERM), or bytes
nobody planned for, costs that step of that queue only, until its next turn:
the other steps and the other queues go on, and the cause is one log line,
said again at most once every COLLECTOR_TROUBLE_REPEAT_S while it lasts.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Optional, TypeVar, get_args

from smqsup import defaults
from smqsup.collector import stats
from smqsup.collector.firing import Firing
from smqsup.collector.lock import LeaderLock
from smqsup.config.model import Config, QueueConfig
from smqsup.errors import BrokerConnectionError, BrokerError, NotLeader
from smqsup.logs import Lasting
from smqsup.store import scripts
from smqsup.store.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")

#: When a promote step failed (Redis refusing it), the next try, in s.
_FAILED_PROMOTE_RETRY_S = 1.0


def lock_ttl_ms(cfg: Config) -> int:
    """The collector lock's TTL: heartbeat_timeout, so that a dead leader is
    replaced about as fast as a dead consumer is noticed."""
    return max(1000, int(cfg.heartbeat_timeout_s * 1000))


#: What a queue's collector does at its own pace: its lock step (leader or
#: contender), and as the leader the steps of _lead and _dependencies.
Job = Literal["lock_step", "scan", "promote", "sample", "retired", "fire", "tell", "holds", "groups"]


@dataclass
class _QueueGC:
    queue: QueueConfig
    lock: LeaderLock
    #: When each job is due next (monotonic; 0.0: at once).
    due: dict[Job, float] = field(default_factory=lambda: dict.fromkeys(get_args(Job), 0.0))
    groups_cursor: bytes = b"0"  # the repair's place in the queue's groups (store/ops/groups.py)
    #: When Redis last refused this process's heartbeats of the queue (monotonic).
    heartbeats_refused_at: Optional[float] = None

    def turn(self, job: Job, now: float, every_s: float) -> bool:
        """Whether ``job`` is due at ``now``; if it is, it is due next ``every_s`` later."""
        if now < self.due[job]:
            return False
        self.due[job] = now + every_s
        return True


class Collector:
    """This process's part in the election, and the work when it leads.
    Call ``tick()`` often (every 0.1 s or so); it returns quickly and never
    raises for Redis trouble."""

    def __init__(self, broker: Broker, cfg: Config, *, owner: str = "") -> None:
        self.broker = broker
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self._queues: dict[str, _QueueGC] = {}
        self._backoff_until = 0.0
        self._trouble = Lasting(log, repeat_s=defaults.COLLECTOR_TROUBLE_REPEAT_S)  # failing steps, per queue
        self._wrong_keys: dict[str, list[str]] = {}  # group keys of the wrong type said, per queue
        # Reclaim only after Redis has been reachable for a whole
        # heartbeat_timeout: after an outage every heartbeat looks stale until
        # the supervisors have had the time to renew them.
        self._connected_since: Optional[float] = time.monotonic()
        self.firing = Firing(broker, cfg)
        self.update(cfg)

    def update(self, cfg: Config) -> None:
        """Follow a reloaded config: join new queues, leave removed ones."""
        self.cfg = cfg
        self.firing.cfg = cfg
        ttl = lock_ttl_ms(cfg)
        # One election per partition: each is a queue of its own in Redis.
        wanted = {p: q for name, q in cfg.queues.items()
                  for p in self.broker.queues.partition_names(name, q.partitions)}
        for name in list(self._queues):
            if name not in wanted:
                self._queues.pop(name).lock.release()
                self.firing.forget(name)
        for name, q in wanted.items():
            state = self._queues.get(name)
            if state is None:
                token = f"{self.owner}:{os.urandom(4).hex()}"
                key = self.broker.keys(name).gc_lock
                self._queues[name] = _QueueGC(q, LeaderLock(self.broker, key, token, ttl))
            else:
                state.queue = q
                state.lock.ttl_ms = ttl

    def wake_in(self, longest_s: float) -> float:
        """Seconds until a queue this process leads is due for a look at its
        delayed and scheduled messages, at most ``longest_s``."""
        now = time.monotonic()
        # valid(), not still_valid(): a look, leaving the tick to find out and say that a lock was lost.
        due = [at for s in self._queues.values() if s.lock.valid() for at in (s.due["promote"], s.due["fire"])]
        return max(0.0, min([longest_s, *(at - now for at in due)]))

    def leading(self) -> list[str]:
        return sorted(n for n, s in self._queues.items() if s.lock.still_valid())

    def redis_trouble(self, queue: Optional[str] = None) -> None:
        """Another part of this process failed to reach Redis: heartbeats may
        have lapsed everywhere, so wait a heartbeat_timeout before reclaiming.
        With ``queue``: Redis refused this process's heartbeats of that queue
        only (OOM, a key of the wrong type); wait before reclaiming there."""
        if queue is None:
            self._connected_since = None
        elif queue in self._queues:
            self._queues[queue].heartbeats_refused_at = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if now < self._backoff_until:
            return
        self.firing.begin_tick()
        try:
            self._rounds(now)
            for name, state in self._queues.items():
                self._tick_queue(name, state, now)
        except BrokerConnectionError as exc:
            log.warning("collector: Redis unavailable (%s); retrying in 1 s", exc)
            self._backoff_until = now + 1.0
            self._connected_since = None
            return
        if self._connected_since is None:
            self._connected_since = now

    def _rounds(self, now: float) -> None:
        """The promote and outbox looks of every queue led and due now, each
        in one round trip for all of them (one per queue and look was most of
        an idle supervisor's round trips). A queue with more to do, or whose
        look failed, goes on alone in _lead, where its errors are said."""
        led = {name: s for name, s in self._queues.items() if s.lock.valid()}
        locks = {name: (s.lock.key, s.lock.token) for name, s in led.items() if now >= s.due["promote"]}
        tell = [name for name, s in led.items() if now >= s.due["tell"]]
        try:
            for name, result in self.broker.messages.promote_many(locks, batch=defaults.PROMOTE_BATCH).items():
                self._promoted_in_round(name, led[name], result, now)
            waiting = self.broker.workflows.outboxes_waiting(tell) if tell else set()
        except BrokerConnectionError:
            raise
        except Exception:  # noqa: BLE001 - Redis refusing, or a bug: each queue's own step tries and says
            log.debug("collector: the looks of all queues in one round trip failed", exc_info=True)
            return
        for name in tell:
            if name not in waiting:
                led[name].due["tell"] = now + defaults.OUTBOX_LOOK_S

    def _promoted_in_round(self, name: str, state: _QueueGC, result: "scripts.PromoteResult | BrokerError",
                           now: float) -> None:
        if isinstance(result, BrokerConnectionError):
            raise result  # a master out of reach: as the queue's own step would
        if isinstance(result, NotLeader):
            state.lock.drop()
            log.warning("queue %s: no longer the garbage collector (lock taken over); stepping down", name)
        elif isinstance(result, BrokerError):
            self._report(name, "promote delayed messages", str(result))
            state.due["promote"] = now + _FAILED_PROMOTE_RETRY_S
        else:
            self._trouble.clear((name, "promote delayed messages"), "queue %s: collector: %s works again", name,
                                "promote delayed messages")
            state.due["promote"] = now + self._promoted(name, result)

    def _may_reclaim(self, now: float, state: _QueueGC) -> bool:
        timeout = self.cfg.heartbeat_timeout_s
        refused = state.heartbeats_refused_at
        return (self._connected_since is not None and now - self._connected_since >= timeout
                and (refused is None or now - refused >= timeout))

    def _tick_queue(self, name: str, state: _QueueGC, now: float) -> None:
        lock = state.lock
        if now >= state.due["lock_step"]:
            was = lock.held
            if lock.step() and not was:
                log.info("queue %s: this process (%s) is now the garbage collector", name, self.owner)
                self._fact(name, state, leader_changes=1)
                state.due["scan"] = state.due["promote"] = state.due["fire"] = now
                self.firing.forget(name)  # a round begun under an earlier lock read what is stale now
            # Contenders try often so that failover takes about one TTL.
            interval = lock.renew_interval_s if lock.held else min(lock.renew_interval_s,
                                                                    self.cfg.heartbeat_interval_s)
            state.due["lock_step"] = now + interval
        if not lock.still_valid():
            return
        try:
            self._lead(name, state, now)
        except NotLeader:
            lock.drop()
            log.warning("queue %s: no longer the garbage collector (lock taken over); stepping down", name)

    def _lead(self, name: str, state: _QueueGC, now: float) -> None:
        """The steps of a queue this process leads that are due at ``now``."""
        lock = state.lock
        if self._may_reclaim(now, state) and state.turn("scan", now, self.cfg.heartbeat_interval_s):
            self._step(name, state, "reclaim lost consumers", self._collect)
        if self._may_reclaim(now, state) and state.turn("retired", now, defaults.RETIRED_SCAN_S):
            self._step(name, state, "sweep retired consumers", self._sweep_retired)
        if state.turn("promote", now, _FAILED_PROMOTE_RETRY_S):
            wait_s = self._step(name, state, "promote delayed messages", self._promote)
            if wait_s is not None:
                state.due["promote"] = now + wait_s
        if state.turn("fire", now, _FAILED_PROMOTE_RETRY_S):
            lock_pair = (lock.key, lock.token)
            wait_s = self._step(name, state, "fire schedules", lambda n, _: self.firing.look(n, lock_pair))
            if wait_s is not None:
                state.due["fire"] = time.monotonic() + wait_s
        if self.cfg.stats and now >= state.due["sample"]:
            # On the second grid, so points are about 1 s apart.
            state.due["sample"] = max(state.due["sample"] + 1.0, now + 0.5)
            self._step(name, state, "sample statistics", lambda n, _: stats.sample(self.broker, n))
        self._dependencies(name, state, now)

    def _dependencies(self, name: str, state: _QueueGC, now: float) -> None:
        """Tell the children of the queue's ended messages that a consumer
        did not (it died first), and finish the holds a producer left half
        done (store/ops/workflows.py): both steps repeat without effect."""
        flows = self.broker.workflows
        if state.turn("tell", now, defaults.OUTBOX_LOOK_S):
            self._step(name, state, "tell children their parents ended", lambda n, _: flows.drain_all(n))
            self._step(name, state, "try the outbox entries set aside again", lambda n, _: flows.retry_parked(n))
        if state.turn("holds", now, defaults.HOLD_REPAIR_S / 2):
            self._step(name, state, "register held messages with their parents",
                       lambda n, _: flows.repair_holds(n, int(defaults.HOLD_REPAIR_S * 1000)))
        if state.turn("groups", now, defaults.GROUP_REPAIR_S):
            self._step(name, state, "repair message groups", self._repair_groups)

    def _repair_groups(self, name: str, state: _QueueGC) -> None:
        lock = state.lock
        r = self.broker.groups.repair(name, (lock.key, lock.token), state.queue.group_concurrency,
                                      state.groups_cursor)
        state.groups_cursor, said = r.cursor, self._wrong_keys.get(name, [])
        for key in set(said) - set(r.wrong):
            log.info("queue %s: group key %s repaired; grouped messages go on", name, key)
        for key in set(r.wrong) - set(said):  # (once a key, not at every repair; status shows it)
            log.warning("queue %s: group key %s: grouped messages wait until it is deleted or repaired", name, key)
        self._wrong_keys[name] = r.wrong
        if r.fixed or r.turns:
            log.warning("queue %s: collector: %d group running count(s) set right and %d group(s) given back "
                        "their turn (a key changed by hand, or a consumer's list deleted?)", name, r.fixed, r.turns)
        if r.dead:
            log.error("queue %s: collector: %d member(s) of the groups' ready set were no group's message "
                      "(written by hand?); dead-lettered, malformed", name, r.dead)

    def _step(self, name: str, state: _QueueGC, what: str, step: Callable[[str, _QueueGC], T]) -> Optional[T]:
        """Run one step of one queue's collection. Redis refusing it, or an
        unexpected error, costs this step until its next turn (None), said in
        one line; Redis unreachable and a lost lock are the caller's."""
        try:
            result = step(name, state)
        except (BrokerConnectionError, NotLeader):
            raise
        except BrokerError as exc:
            self._report(name, what, str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - no Redis state may take the supervisor down
            # A bug, or bytes in Redis nobody planned for.
            self._report(name, what, f"unexpected {type(exc).__name__}: {exc}")
            log.debug("queue %s: collector: %s failed", name, what, exc_info=True)
            return None
        self._trouble.clear((name, what), "queue %s: collector: %s works again", name, what)
        return result

    def _report(self, name: str, what: str, text: str) -> None:
        self._trouble.report((name, what), text, "queue %s: collector cannot %s (other queues go on; said again "
                             "every %.0f s while it lasts): %s", name, what, defaults.COLLECTOR_TROUBLE_REPEAT_S, text)

    def _fact(self, name: str, state: _QueueGC, **increments: int) -> None:
        """Count collector facts; a refusal costs the count, never the work it counts."""
        self._step(name, state, "record collector facts", lambda n, _: self.broker.statistics.gc_fact(n, **increments))

    def _collect(self, name: str, state: _QueueGC) -> None:
        timeout_ms = int(self.cfg.heartbeat_timeout_s * 1000)
        stale, orphans = self.broker.registry.stale_consumers(name, timeout_ms)
        for cid in stale + orphans:
            reason = "consumer lost" if cid in stale else "consumer lost (no heartbeat)"
            # One consumer Redis refuses (its list of the wrong type) costs its own reclaim, not the others'.
            def one(n: str, s: _QueueGC, c: str = cid, why: str = reason) -> scripts.ReclaimResult:
                return self.broker.registry.reclaim_stale(n, c, retry_threshold=s.queue.retry_threshold, reason=why,
                                                          stale_after_ms=timeout_ms, lock=(s.lock.key, s.lock.token))
            r = self._step(name, state, f"reclaim lost consumer {cid}", one)
            if r is None or r.remaining == -1:
                continue  # refused (said by _step: tried again at the next scan), or it came back meanwhile
            moved = r.requeued + r.dead_lettered
            self._fact(name, state, consumers_lost=1, reclaimed=moved, orphans=int(cid in orphans))
            log.warning("queue %s: consumer %s lost (no heartbeat for %.1fs): %d message(s) reclaimed, "
                        "%d to pending, %d dead-lettered", name, cid, self.cfg.heartbeat_timeout_s, moved,
                        r.requeued, r.dead_lettered)

    def _sweep_retired(self, name: str, state: _QueueGC) -> None:
        """Return, free of cost, messages that reached the list of a consumer
        after it was unregistered (it moved one more message before it learnt
        it had been declared dead, then died): nobody else watches that list."""
        lock = (state.lock.key, state.lock.token)
        for cid in self.broker.registry.retired_with_messages(name, int(defaults.RETIRED_WATCH_S * 1000)):
            def sweep(n: str, _: _QueueGC, c: str = cid) -> scripts.ReclaimResult:
                return self.broker.registry.sweep_retired(n, c, lock=lock)
            r = self._step(name, state, f"sweep retired consumer {cid}", sweep)
            if r is not None and (r.requeued or r.dead_lettered):
                self._fact(name, state, orphans=1, reclaimed=r.requeued + r.dead_lettered)
                log.warning("queue %s: %d message(s) found in the list of retired consumer %s, returned",
                            name, r.requeued + r.dead_lettered, cid)

    def _promote(self, name: str, state: _QueueGC) -> float:
        """Promote what is due, PROMOTE_BATCHES_PER_TICK batches at most;
        return seconds until the next look (0 when more are due: the next
        tick goes on, so a million due messages never hold the supervisor's
        loop, its reaping and its heartbeats, for more than a few batches).

        A due message is at most that late: the look comes at the next known
        due time (the supervisor's loop wakes for it: wake_in), and at least
        every PROMOTE_POLL_S for messages published or retried since the
        last look with an earlier due time."""
        lock = (state.lock.key, state.lock.token)
        for _ in range(defaults.PROMOTE_BATCHES_PER_TICK):
            wait_s = self._promoted(name, self.broker.messages.promote(name, lock=lock, batch=defaults.PROMOTE_BATCH))
            if wait_s:
                return wait_s
        return 0.0

    @staticmethod
    def _promoted(name: str, r: "scripts.PromoteResult") -> float:
        """Say what one promote batch did; seconds until the next look (0: more are due now)."""
        if r.moved:
            log.debug("queue %s: %d delayed or scheduled message(s) due, now ready", name, r.moved)
        if r.expired:
            log.info("queue %s: %d scheduled or delayed message(s) expired before they were due; "
                     "dead-lettered", name, r.expired)
        if r.wait_ms == 0:
            return 0.0
        return defaults.PROMOTE_POLL_S if r.wait_ms < 0 else min(defaults.PROMOTE_POLL_S, r.wait_ms / 1000.0)

    def release_all(self) -> None:
        """Give up every lock held (at a clean stop), so others take over at once."""
        for state in self._queues.values():
            state.lock.release()


def leaders(broker: Broker, queues: Mapping[str, object]) -> dict[str, str | None]:
    """queue -> current collector's owner token (None: no leader now)."""
    return {name: broker.registry.lock_holder(broker.keys(name).gc_lock) for name in queues}
