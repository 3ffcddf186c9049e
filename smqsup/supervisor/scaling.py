"""Autoscaling, parent side: each autoscaled queue's consumer count follows
what Redis says of its backlog, one step at a time with a cooldown.

    every SCALE_LOOK_S: Lags.read (one round trip for every autoscaled queue)
                        + the children's slots (messages running, time busy)
        ─▶ Look ─▶ step() (pure) ─▶ QueueState.target ± 1 ─▶ reconcile starts or stops one

Up when the queue's lag (the age of its oldest ready message, Redis clock)
passes scale_up_lag, or its ready messages per unit of capacity (target ×
concurrency) pass scale_up_backlog. Down once the queue had nothing ready
and one consumer fewer would have been busy at most SCALE_DOWN_BUSY of the
time, for scale_down_after on end. Never two steps within scale_cooldown.
The gap between the two (a load that keeps one consumer fewer busy past
SCALE_DOWN_BUSY never steps down, and one that leaves nothing waiting never
steps up) is what keeps a steady load from flapping.

A queue with a rate_limit (or a group_concurrency, or a group_rate_limit)
steps up only while its handlers are busy at least SCALE_DOWN_BUSY of its
capacity, and down as if nothing were ready: beyond rate × a message's
handler time (or the groups' limits), consumers can only wait for the
limit, and their backlog is the limit's, not theirs to take.

Each supervisor scales its own consumers from what it reads: several
supervisors of one queue each add their step while it lags.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Optional

from smqsup import defaults
from smqsup.config import model as config_mod
from smqsup.config.model import QueueConfig
from smqsup.errors import BrokerError
from smqsup.logs import Lasting
from smqsup.supervisor.consumers import Consumers
from smqsup.supervisor.states import QueueState, State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Look:
    """What one look saw of a queue."""

    ready: int  # messages ready to be taken
    lag_s: Optional[float]  # age of the oldest of them (None: unknown)
    busy: float  # messages this supervisor's consumers ran at once, on average since the last look


@dataclass(frozen=True)
class ScaleEvent:
    """A step taken: when (ms since the epoch), from and to what count, why."""

    at_ms: int
    old: int
    new: int
    why: str


@dataclass
class Pace:
    """A queue's autoscaling memory between looks."""

    last_step_at: float = -math.inf  # monotonic
    idle_since: Optional[float] = None  # monotonic: since when one consumer fewer would have done
    last: Optional[ScaleEvent] = None


def pressure(q: QueueConfig, target: int, look: Look) -> Optional[str]:
    """Why the queue needs one more consumer, or None."""
    if look.lag_s is not None and look.lag_s > q.scale_up_lag_s:
        return f"lag {look.lag_s:.1f}s > {q.scale_up_lag_s:g}s"
    per_unit = look.ready / max(1, target * q.concurrency)
    if per_unit > q.scale_up_backlog:
        return f"{look.ready} ready, {per_unit:.0f} per consumer > {q.scale_up_backlog}"
    return None


def held_back(q: QueueConfig) -> bool:
    """Whether the queue's limits may hold ready messages back from idle
    consumers: a rate_limit, a group_concurrency or a group_rate_limit."""
    return bool(q.rate_limit_per_s or q.group_concurrency or q.group_rate_limit_per_s)


def step(q: QueueConfig, target: int, look: Look, pace: Pace, now: float) -> tuple[int, str]:
    """(+1 or -1, why) to move an autoscaled queue's ``target``, or (0, "")."""
    lowest, highest = q.consumers, q.consumers_max or q.consumers
    cooled = now - pace.last_step_at >= q.scale_cooldown_s
    # A queue whose limits hold messages back (its rate, its groups' limits)
    # lags whenever they do; more consumers help only while its handlers
    # are what is busy.
    limited = held_back(q)
    why = pressure(q, target, look)
    if why is not None and (not limited or look.busy >= target * q.concurrency * defaults.SCALE_DOWN_BUSY):
        pace.idle_since = None
        return (1, why) if target < highest and cooled else (0, "")
    spare = (look.ready == 0 or limited) and look.busy <= (target - 1) * q.concurrency * defaults.SCALE_DOWN_BUSY
    if not spare:
        pace.idle_since = None
        return 0, ""
    if pace.idle_since is None:
        pace.idle_since = now
    idle_s = now - pace.idle_since
    if target > lowest and idle_s >= q.scale_down_after_s and cooled:
        return -1, f"{look.busy:.1f} of {target * q.concurrency} busy on average, idle for {idle_s:.0f}s"
    return 0, ""


class Autoscaler:
    """The looks and steps of this supervisor's autoscaled queues. Not thread-safe."""

    def __init__(self, pool: Consumers, trouble: Lasting) -> None:
        self.pool = pool
        self._trouble = trouble
        self.paces: dict[str, Pace] = {}
        self._busy_us: dict[int, int] = {}  # child pid -> its slot's busy_us at the last look
        self._looked_at = time.monotonic()
        self._next = 0.0

    def tick(self) -> None:
        """Look every SCALE_LOOK_S (only with an autoscaled queue) and take the steps due."""
        now = time.monotonic()
        scaled = {name: q for name, q in self.pool.live_queues() if q.config.consumers_max is not None}
        if now < self._next or not scaled:
            return
        self._next = now + defaults.SCALE_LOOK_S
        try:
            lags = self.pool.broker.lags.read({name: q.config.partitions for name, q in scaled.items()})
        except BrokerError as exc:  # hold every count while Redis does not answer
            self._trouble.report("scale", str(exc), "autoscaling holds its counts: %s", exc)
            return
        self._trouble.clear("scale", "autoscaling looks at the queues again")
        busy = self._busy(now)
        for name, q in scaled.items():
            lag = lags.get(name)
            if lag is None or not q.policy.may_start(now):
                continue
            # A paused queue has nothing its consumers may take: idle, whatever waits.
            look = Look(0, 0.0, 0.0) if lag.paused else Look(lag.ready, lag.lag_s, busy.get(name, 0.0))
            self._consider(q, look, now)

    def _busy(self, now: float) -> dict[str, float]:
        """Messages running at once per queue since the last look: the time
        its children spent in handlers, or more if more are running now."""
        span = max(now - self._looked_at, 1e-3)
        self._looked_at = now
        spent: dict[str, float] = {}
        running: dict[str, int] = {}
        seen: dict[int, int] = {}
        for c in self.pool.children.values():
            view = self.pool.slots.read(c.slot)
            seen[c.pid] = view.busy_us
            delta = max(0, view.busy_us - self._busy_us.get(c.pid, 0))
            spent[c.queue] = spent.get(c.queue, 0.0) + delta / 1e6
            running[c.queue] = running.get(c.queue, 0) + (view.in_flight if view.busy_since_us else 0)
        self._busy_us = seen
        return {name: max(spent[name] / span, running.get(name, 0)) for name in spent}

    def _consider(self, q: QueueState, look: Look, now: float) -> None:
        name = q.config.name
        pace = self.paces.setdefault(name, Pace())
        change, why = step(q.config, q.target, look, pace, now)
        if change > 0 and (q.roll_failed is not None or any(
                c.state is State.STARTING for c in self.pool.of(name))):
            # Not while the last step's consumer is starting (a slow import
            # must not take the queue to max), nor from broken code on disk.
            return
        if change:
            self.moved(q, q.target + change, why, now)

    def moved(self, q: QueueState, new: int, why: str, now: Optional[float] = None, *, said: bool = False) -> None:
        """Set ``q``'s target to ``new`` (a step, or ``why`` a signal) and
        remember it as its last scale event; the cooldown runs from now.
        Logged unless the caller ``said`` it already."""
        pace = self.paces.setdefault(q.config.name, Pace())
        pace.last_step_at = time.monotonic() if now is None else now
        old, q.target = q.target, new
        pace.last = ScaleEvent(int(time.time() * 1000), old, new, why)
        if not said:
            log.info("queue %s: scaled %s %d->%d (%s)", q.config.name, "up" if new > old else "down", old, new, why)

    def step_all(self, by: int, why: str) -> None:
        """SIGTTIN (``by`` +1) or SIGTTOU (-1): every queue one consumer more or
        fewer, within its bounds: at least 1 (an autoscaled queue's min), at most
        an autoscaled queue's max (else the per-queue limit) and the limit of
        consumers in all queues."""
        total = sum(q.target for _, q in self.pool.live_queues())
        for name, q in self.pool.live_queues():
            cfg = q.config
            if by > 0:
                most = cfg.consumers_max or config_mod.CONSUMERS_PER_QUEUE_MAX
                if q.target >= most or total >= config_mod.CONSUMERS_TOTAL_MAX:
                    bound = f"its max {most}" if cfg.consumers_max else f"{most} per queue"
                    log.warning("%s: queue %s stays at %d consumers (at most %s, %d in all queues)",
                                why, name, q.target, bound, config_mod.CONSUMERS_TOTAL_MAX)
                    continue
                total += 1
            elif q.target <= (least := cfg.consumers if cfg.consumers_max else 1):
                log.info("%s: queue %s stays at %d consumer(s) (at least %d)", why, name, q.target, least)
                continue
            self.moved(q, q.target + by, why, said=True)
            log.info("%s: queue %s scaled to %d", why, name, q.target)
