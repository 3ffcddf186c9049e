"""What this supervisor tells Redis of each of its queues, for ``smqsup
status``, the web UI and /metrics: its consumer target and range, how many
are ready, a roll running or failed, the last scale event
(store/ops/supervisors.py SupervisorInfo), rewritten every heartbeat_interval."""

from __future__ import annotations

import time

from smqsup import defaults
from smqsup.errors import BrokerError
from smqsup.store.ops.supervisors import SupervisorInfo
from smqsup.supervisor.consumers import Consumers
from smqsup.supervisor.scaling import Autoscaler
from smqsup.supervisor.states import QueueState, State


class QueueInfo:
    """The writer of this supervisor's SupervisorInfo entries. Not thread-safe."""

    def __init__(self, pool: Consumers, scaler: Autoscaler) -> None:
        self.pool = pool
        self.scaler = scaler
        self.field = f"{pool.host}:{pool.pid}"
        self._next = 0.0
        self._written: set[str] = set()
        self._skew_ms = 0  # the Redis clock minus ours, at the last write: infos are dated by Redis's

    def tick(self, every_s: float) -> None:
        """Rewrite every queue's entry once per ``every_s``; Redis refusing costs one try."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + every_s
        infos = {name: self.info(q, every_s) for name, q in self.pool.live_queues()}
        try:
            at_ms = int(time.time() * 1000)
            redis_ms = self.pool.broker.supervisors.write(infos, self.field,
                                                          every_s * defaults.SUPERVISOR_INFO_KEEP_EVERIES)
            if redis_ms is not None:
                self._skew_ms = redis_ms - at_ms
            gone = self._written - set(infos)
            if gone:
                self.pool.broker.supervisors.forget(gone, self.field)
        except BrokerError:
            return  # said by the heartbeats, which fail alike
        self._written = set(infos)

    def info(self, q: QueueState, every_s: float) -> SupervisorInfo:
        name = q.config.name
        pace = self.scaler.paces.get(name)
        last = pace.last if pace is not None else None
        running = sum(1 for c in self.pool.of(name) if c.state is State.RUNNING)
        return SupervisorInfo(
            host=self.pool.host, pid=self.pool.pid, target=q.target, min=q.config.consumers,
            max=q.config.consumers_max or q.config.consumers, running=running,
            autoscaled=q.config.consumers_max is not None, rolling=q.rolling, roll_failed=q.roll_failed,
            scaled=None if last is None else {"at_ms": last.at_ms, "from": last.old, "to": last.new, "why": last.why},
            every_s=every_s, at_ms=int(time.time() * 1000) + self._skew_ms)

    def withdraw(self) -> None:
        """At a clean stop: this supervisor's entries go."""
        try:
            self.pool.broker.supervisors.forget(self._written, self.field)
        except BrokerError:
            pass  # they go stale and expire
