"""The consumer children of every queue, parent side: fork them, stop and
kill them, reap them, and keep each queue at its target count and
generation, carrying out what ``decide`` says.

    reconcile ─▶ decide.queue_actions ─▶ spawn (fork ─▶ child.run) / stop (SIGTERM)
    limits    ─▶ message_timeout: SIGKILL; max_memory: graceful recycle
    exited    ─▶ reclaim the dead child's list ─▶ decide.death ─▶ RestartPolicy
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, Optional

from smqsup import defaults
from smqsup.config.model import Config
from smqsup.errors import BrokerError
from smqsup.logs import Lasting
from smqsup.store.broker import Broker
from smqsup.supervisor import child as child_mod
from smqsup.supervisor import deaths, decide, rolls
from smqsup.supervisor.codedir import CodeDir
from smqsup.supervisor.decide import Death, StopChild
from smqsup.supervisor.plan import ReloadPlan, generation
from smqsup.supervisor.protocol import MAX_SLOTS, Slots, monotonic_us, signal_child
from smqsup.supervisor.reclaims import Kind, Reclaim, Reclaims
from smqsup.supervisor.reports import Reports
from smqsup.supervisor.resources import Sampler
from smqsup.supervisor.states import Child, QueueState, State, StopReason, describe_status
from smqsup.worker.sources import Sources

log = logging.getLogger(__name__)


class Consumers:
    """Every queue's desired state and every consumer child. Not thread-safe."""

    def __init__(self, cfg: Config, url: str, broker: Broker, reclaims: Reclaims, trouble: Lasting) -> None:
        self.cfg = cfg
        self.url = url
        self.broker = broker
        self.reclaims = reclaims
        self._trouble = trouble
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.slots = Slots()
        self.sampler = Sampler()
        self.children: dict[int, Child] = {}
        self.queues: dict[str, QueueState] = {name: self._new_queue(name) for name in cfg.queues}
        self.preloaded: dict[str, Callable[..., Any]] = {}
        self.preloaded_sources: dict[str, Sources] = {}
        self._snapshots: dict[Sources, Sources] = {}
        self.reports = Reports()
        self.code = CodeDir(cfg.path)
        self._next_sample = 0.0

    def _new_queue(self, name: str) -> QueueState:
        q = self.cfg.queues[name]
        return QueueState(q, generation(q, self.cfg), q.consumers)

    def of(self, queue: str) -> list[Child]:
        return [c for c in self.children.values() if c.queue == queue]

    # --- keeping the target --------------------------------------------------------

    def reconcile(self) -> None:
        """Start and stop children toward each queue's target count and generation."""
        now = time.monotonic()
        by_queue: dict[str, list[Child]] = {name: [] for name in self.queues}
        for c in self.children.values():
            by_queue.setdefault(c.queue, []).append(c)
        for name, q in list(self.queues.items()):
            mine = by_queue[name]
            for action in decide.queue_actions(q, mine, now, self._busy):
                if isinstance(action, StopChild):
                    self.stop(action.child, action.reason)
                elif self.spawn(q) is None:
                    break  # no slot or no fork: said once, tried again next tick
            if q.policy.failures and decide.ran_long_enough(mine, q.generation, now):
                q.policy.stable()
            if rolls.finished(q, mine):
                self._roll_done(q, now)
            elif (late := rolls.not_ready(q, mine, now)) is not None:
                self._roll_late(q, late)

    def _busy(self, c: Child) -> bool:
        return self.slots.read(c.slot).busy_since_us != 0

    def spawn(self, q: QueueState) -> Optional[Child]:
        """Fork one consumer of queue ``q``; None when no slot is free or fork fails."""
        name = q.config.name
        try:
            slot = self.slots.allocate()
        except IndexError:
            # Only a pile of children still stopping fills the table (the config
            # bounds consumers to a quarter of it): wait for them, keep the rest.
            self._refuse(name, f"all {MAX_SLOTS} child slots are in use (children still stopping?); "
                               "starting it once one is free")
            return None
        self.reports.ensure()
        index = q.free_index({c.index for c in self.of(name) if c.live})
        token = os.urandom(3).hex()
        try:
            pid = child_mod.fork_holding_term()
        except OSError as exc:  # EAGAIN: a process limit (ulimit -u) reached
            self.slots.release(slot)
            self._refuse(name, f"fork failed ({exc.strerror or exc}); trying again each tick")
            return None
        if pid == 0:
            child_mod.run(child_mod.ChildSpec(
                config=self.cfg, queue=q.config, url=self.url, consumer_id=f"{self.host}:{os.getpid()}:{token}",
                index=index, slot=slot, slots=self.slots, parent_pid=self.pid, handler=self.preloaded.get(name),
                reports_fd=self.reports.fd))
        self._trouble.clear("spawn", "queue %s: starting consumers again", name)
        c = Child(pid, name, index, f"{self.host}:{pid}:{token}", q.generation, slot, time.monotonic(),
                  concurrency=q.config.concurrency)
        self.children[pid] = c
        log.info("queue %s: consumer #%d started (pid %d)", name, index, pid)
        return c

    def _refuse(self, name: str, why: str) -> None:
        """Start no child now; say why once, not on every tick that tries again."""
        self._trouble.report("spawn", why, "queue %s: not starting a consumer: %s", name, why, level=logging.ERROR)

    def stop(self, c: Child, reason: StopReason, deadline: Optional[float] = None) -> None:
        """Graceful: SIGTERM now, SIGKILL at ``deadline`` (default: shutdown_timeout from now)."""
        if c.stopping:
            return
        c.stopping_for(reason, deadline if deadline is not None else time.monotonic() + self.cfg.shutdown_timeout_s)
        signal_child(c.pid, signal.SIGTERM)

    def stop_all(self, reason: StopReason) -> None:
        deadline = time.monotonic() + self.cfg.shutdown_timeout_s
        for c in self.children.values():
            self.stop(c, reason, deadline)

    def kill_all(self) -> None:
        """Stop at once: every child's stop is due now (free of cost all the same)."""
        self.stop_all(StopReason.SHUTDOWN)
        for c in self.children.values():
            assert c.stop is not None
            c.stop.kill_at = 0.0

    def update_ready(self) -> None:
        """Children that reported ready in their slot move to RUNNING."""
        for c in self.children.values():
            if c.state is State.STARTING and self.slots.read(c.slot).ready_us:
                c.move(State.RUNNING)
                # A preloaded handler's files are the ones the parent imported.
                c.sources = self._shared(Sources.from_report(self.reports.take(c.pid))) or \
                    self.preloaded_sources.get(c.queue)
                log.info("queue %s: consumer #%d (pid %d) ready", c.queue, c.index, c.pid)

    def _shared(self, sources: Optional[Sources]) -> Optional[Sources]:
        """One object for equal snapshots (the children of a generation):
        memory once, and one look per SIGHUP (rolls.changed_code)."""
        if sources is None:
            return None
        live = {id(c.sources) for c in self.children.values() if c.sources is not None}
        self._snapshots = {s: s for s in self._snapshots.values() if id(s) in live}  # drop the unused
        return self._snapshots.setdefault(sources, sources)

    # --- limits and deadlines --------------------------------------------------------

    def check_limits(self) -> None:
        """message_timeout (SIGKILL), max_memory (graceful recycle), resource samples."""
        now = time.monotonic()
        now_us = monotonic_us()
        sample = now >= self._next_sample
        if sample:
            self._next_sample = now + self.cfg.heartbeat_interval_s
        for c in self.children.values():  # nothing below adds or removes a child
            q = self.queues.get(c.queue)
            if q is None or c.stopping:
                continue
            timeout_s = q.config.message_timeout_s  # 0 (the default): no limit, no slot to read
            if timeout_s and decide.over_time(self.slots.read(c.slot).busy_since_us, now_us,
                                              decide.kill_after_s(timeout_s, c.concurrency)):
                c.stopping_for(StopReason.TIMEOUT, None)
                signal_child(c.pid, signal.SIGKILL)
                continue
            if sample:
                self.sampler.sample(c)
                limit = q.config.max_memory_bytes
                if limit and c.rss_bytes > limit:
                    log.warning("queue %s: consumer #%d (pid %d) uses %d MB > max_memory %d MB; recycling it",
                                c.queue, c.index, c.pid, c.rss_bytes >> 20, limit >> 20)
                    self.stop(c, StopReason.RECYCLE)

    def enforce_deadlines(self) -> None:
        """SIGKILL children whose graceful stop overran; their reclaim stays free."""
        for c in decide.overdue(self.children.values(), time.monotonic()):
            assert c.stop is not None
            log.warning("queue %s: consumer #%d (pid %d) did not stop in time; killing it, its message "
                        "goes back to pending without costing an attempt", c.queue, c.index, c.pid)
            c.stop.kill_at = None
            c.stop.killed_by_us = True
            signal_child(c.pid, signal.SIGKILL)

    # --- reaping -------------------------------------------------------------------------

    def exited(self, c: Child, status: int) -> None:
        """A reaped child: reclaim its list (free or not, by the cost rule) and
        decide about its replacement."""
        now = time.monotonic()  # before the reclaim, which may wait on Redis
        del self.children[c.pid]
        c.move(State.EXITED)
        view = self.slots.read(c.slot)
        self.slots.release(c.slot)
        self.sampler.forget(c.pid)
        report = self.reports.take(c.pid)
        q = self.queues.get(c.queue)
        threshold = q.config.retry_threshold if q else defaults.RETRY_THRESHOLD
        cause = describe_status(status, ready=view.ready_us != 0)
        self._record_exit(c, cause)
        costs = decide.costs_attempt(c)
        started = (view.started, view.returned)  # what it never started, or saw return, goes back free
        if c.stop_reason is StopReason.TIMEOUT:
            limit = q.config.message_timeout_s if q else 0
            self._reclaim(c, costs, f"timeout after {limit:g} s", threshold, started)
            log.error("queue %s: consumer #%d (pid %d) killed: message_timeout %gs passed",
                      c.queue, c.index, c.pid, limit)
        elif c.stop_reason is StopReason.CANCEL:
            self._reclaim(c, costs, "cancelled", threshold, started)
            log.warning("queue %s: consumer #%d (pid %d) was replaced to stop a cancelled message (%s); the "
                        "message is dead-lettered \"cancelled\"", c.queue, c.index, c.pid, cause)
        elif c.stop is not None:
            self._reclaim(c, costs, cause if costs else c.stop.reason.value, threshold, started)
            log.info("queue %s: consumer #%d (pid %d) stopped (%s): %s", c.queue, c.index, c.pid,
                     c.stop.reason.value, cause)
        else:
            held = self._reclaim(c, costs, cause, threshold, started)
            verdict = decide.death(status, view, held, now - c.started_at)
            deaths.log_death(c, status, cause, verdict)
            if q is not None and not self._roll_death(q, c, verdict, rolls.error_line(report) or cause):
                deaths.restart_policy(q.policy, c, verdict, now)
        if q is not None and q.removed and not self.of(c.queue):
            del self.queues[c.queue]

    def _reclaim(self, c: Child, costs: bool, reason: str, threshold: int,
                 started: tuple[int, int]) -> Optional[int]:
        """Return the child's lists, in every partition of its queue; how many
        messages moved (None if a reclaim was postponed). Costly, only the
        oldest frames of a list its slot said started (``started``: that
        many, and of them the oldest that many returned, which go free) cost
        an attempt."""
        kind = Kind.DEAD if costs else Kind.STOPPED
        moved = [self.reclaims.run(Reclaim(kind, p, c.consumer_id, reason, threshold, started=started[0],
                                           returned=started[1]))
                 for p in self.partitions(c.queue)]
        return None if None in moved else sum(m or 0 for m in moved)

    def partitions(self, queue: str) -> list[str]:
        """The partitions of ``queue`` its children are registered in."""
        q = self.queues.get(queue)
        return self.broker.queues.partition_names(queue, q.config.partitions if q is not None else 1)

    def _record_exit(self, c: Child, cause: str) -> None:
        """Restarts and last exit cause of the consumer slot, for the statistics."""
        q = self.queues.get(c.queue)
        if q is None:
            return
        restarts = q.restarts.get(c.index, 0) + (0 if c.stop is not None else 1)
        q.restarts[c.index] = restarts
        reason = cause if c.stop is None else f"{c.stop.reason.value} ({cause})"
        info = {"host": self.host, "supervisor": self.pid, "index": c.index, "restarts": restarts,
                "last_exit": reason, "last_exit_at": round(time.time(), 3)}
        try:
            self.broker.registry.record_slot(c.queue, f"{self.host}:#{c.index}", info)
        except BrokerError as exc:
            log.debug("slot statistics not written: %s", exc)

    # --- scaling and reloading --------------------------------------------------------

    def live_queues(self) -> Iterable[tuple[str, QueueState]]:
        return ((name, q) for name, q in self.queues.items() if not q.removed)

    def apply(self, plan: ReloadPlan, cfg: Config) -> None:
        """Carry out a SIGHUP's plan (``cfg`` is the effective new config).

        Every queue in the file gets the file's consumer count back, so a
        SIGHUP undoes SIGTTIN/SIGTTOU (an autoscaled queue keeps its count,
        within its range); every queue starts its restart policy
        afresh (FATAL included: the fix may be in the file, or on disk); a
        queue whose config changed rolls.
        """
        self.cfg = cfg
        now = time.monotonic()
        for name in plan.added:  # a queue removed earlier and still draining starts afresh
            self.queues[name] = self._new_queue(name)
        for name in plan.removed:
            self.queues[name].removed, self.queues[name].target = True, 0
        for name in dict.fromkeys(plan.rolled + plan.unchanged + tuple(plan.scaled)):  # each once
            q, new = self.queues[name], cfg.queues[name]
            q.policy.reset()
            q.config, q.target = new, _target(q.target, new.consumers, new.consumers_max)
            if name in plan.rolled:
                self._begin(q, "its configuration changed", now)

    # --- rolls ---------------------------------------------------------------------------

    def check_code(self) -> list[str]:
        """SIGHUP: roll each queue whose handler code changed on disk since
        its consumers imported it, and try each failed roll again; the
        queues whose roll this began. A queue already rolling is looked at
        again once its roll ends."""
        now, begun = time.monotonic(), []
        for name, q in list(self.live_queues()):
            if q.rolling:
                q.roll_next = q.roll_next or "check"
            elif q.roll_failed is not None:
                self._begin(q, f"trying again the roll that failed ({q.roll_failed})", now)
                begun.append(name)
            elif (path := rolls.changed_code(self.of(name))) is not None:
                if name in self.preloaded:
                    log.warning("queue %s: %s changed on disk, but preload imported its handler in the "
                                "supervisor: restart smqsup to run the new code", name, path)
                    continue
                self._begin(q, f"{path} changed on disk", now)
                begun.append(name)
        return begun

    def roll(self, names: Iterable[str], why: str) -> None:
        """Roll ``names`` whatever their code (``smqsup roll``); after the running roll, if any."""
        now = time.monotonic()
        for name in names:
            q = self.queues.get(name)
            if q is None or q.removed:
                continue
            if q.rolling:
                q.roll_next = "force"
            else:
                self._begin(q, why, now)

    def _begin(self, q: QueueState, why: str, now: float) -> None:
        running = q.rolling
        rolls.begin(q, generation(q.config, self.cfg), now)
        log.info("queue %s: %s; %s its %d consumer(s) one at a time, each new one ready before an old one stops "
                 "(code from %s)", q.config.name, why, "still rolling" if running else "rolling", q.target,
                 self.code.describe())

    def _roll_done(self, q: QueueState, now: float) -> None:
        assert q.rolling_since is not None
        log.info("queue %s: rolled in %.1fs", q.config.name, now - q.rolling_since)
        rolls.ended(q, now)
        after = q.roll_next
        q.roll_next = None
        if after == "force":
            self._begin(q, "a roll was asked for during the last one", now)
        elif after == "check" and (path := rolls.changed_code(self.of(q.config.name))) is not None:
            self._begin(q, f"{path} changed on disk during the last roll", now)

    def _roll_late(self, q: QueueState, late: Child) -> None:
        """A new child of the roll was not ready in time (an import that
        hangs): the roll fails and the child is stopped."""
        rolls.fail(q, f"a new consumer was not ready within {defaults.ROLL_READY_TIMEOUT_S:g}s")
        log.error("queue %s: roll failed: %s; its consumers of the old code keep running (fix it and reload)",
                  q.config.name, q.roll_failed)
        self.stop(late, StopReason.ROLL)

    def _roll_death(self, q: QueueState, c: Child, verdict: Death, line: str) -> bool:
        """Whether the death of ``c`` failed its queue's roll, or came after
        it failed (then the restart policy is left out of it: the old
        children run on, the new code's back off)."""
        now = time.monotonic()
        at_start = verdict in (Death.CANNOT_RUN, Death.AT_START)
        if not at_start and not rolls.watched(q, c, now):
            return False
        if q.roll_failed is not None:
            # A replacement started from the broken code on disk: it backs
            # off as a crashing consumer does; the queue is not made FATAL
            # (its other consumers run the old code).
            deaths.restart_policy(q.policy, c, Death.AT_START, now)
            return True
        why = rolls.death_in_roll(q, c, verdict is Death.CANNOT_RUN, at_start, now)
        if why is None:
            return False
        rolls.fail(q, f"{why}: {line}")
        log.error("queue %s: roll failed: %s; %s (fix it and reload)", q.config.name, q.roll_failed,
                  "its consumers of the old code keep running" if any(k.generation != q.generation
                  for k in self.of(q.config.name)) else "no consumer of the old code is left")
        return True


def _target(now: int, lowest: int, highest: Optional[int]) -> int:
    """A reload's count: the file's, or for an autoscaled queue the running
    count kept within its (new) range."""
    return lowest if highest is None else min(max(now, lowest), highest)
