"""The supervisor's reclaims: a dead or stopped child's messages go back to
its queue at once, or, while Redis refuses, wait here and are tried again
about once a second (in order, none dropped, until the supervisor ends)."""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass
from typing import Optional

from smqsup import defaults
from smqsup.errors import BrokerError
from smqsup.logs import Lasting
from smqsup.store.broker import Broker
from smqsup.store.scripts import ReclaimResult

log = logging.getLogger(__name__)


class Kind(enum.Enum):
    """Which of the broker's reclaims: each says what the messages cost."""

    DEAD = "dead"  # a child that died: an attempt each
    STOPPED = "stopped"  # a stop we asked for: free
    ORPHAN = "orphan"  # left by a previous supervisor on this host: an attempt each, if still stale


@dataclass(frozen=True)
class Reclaim:
    kind: Kind
    queue: str
    consumer_id: str
    reason: str
    retry_threshold: int
    stale_after_ms: int = 0  # ORPHAN only
    #: DEAD only: the frames its slot said it had started (None: all cost).
    started: Optional[int] = None
    returned: int = 0  # DEAD only: the oldest of those, ended by their handler returning: free

    def run(self, broker: Broker) -> ReclaimResult:
        if self.kind is Kind.DEAD:
            return broker.registry.reclaim_dead(self.queue, self.consumer_id, retry_threshold=self.retry_threshold,
                                                reason=self.reason, started=self.started, returned=self.returned)
        if self.kind is Kind.STOPPED:
            return broker.messages.return_stopped(self.queue, self.consumer_id, reason=self.reason)
        return broker.registry.reclaim_stale(self.queue, self.consumer_id, retry_threshold=self.retry_threshold,
                                             reason=self.reason, stale_after_ms=self.stale_after_ms)


class Reclaims:
    """Reclaims run now or postponed. Not thread-safe (the parent has one thread)."""

    def __init__(self, broker: Broker, trouble: Lasting) -> None:
        self.broker = broker
        self._trouble = trouble
        self._pending: list[Reclaim] = []
        self._next_retry = 0.0

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def run(self, item: Reclaim) -> Optional[int]:
        """Return the consumer's messages now; if Redis cannot take it, keep it
        for ``retry``. How many messages moved (None: postponed, not known)."""
        moved = self._try(item)
        if moved is None:
            self._pending.append(item)
        return moved

    def retry(self, *, now: bool = False) -> None:
        """Run the postponed reclaims, keeping those Redis still refuses; about
        once a second (a refusal, such as a key of the wrong type, may last and
        is not worth a round trip per reclaim per tick) unless ``now``."""
        t = time.monotonic()
        if not self._pending or (t < self._next_retry and not now):
            return
        self._next_retry = t + defaults.RECLAIM_RETRY_S
        self._pending = [item for item in self._pending if self._try(item) is None]

    def _try(self, item: Reclaim) -> Optional[int]:
        where = ("reclaim", item.queue, item.consumer_id)
        try:
            r = item.run(self.broker)
        except BrokerError as exc:
            self._trouble.report(where, str(exc), "queue %s: reclaim of consumer %s postponed (retried each "
                                 "second, said again if the cause changes): %s", item.queue, item.consumer_id, exc)
            return None
        self._trouble.clear(where, "queue %s: postponed reclaim of consumer %s done", item.queue, item.consumer_id)
        moved = r.requeued + r.dead_lettered
        if moved > 0:
            log.info("queue %s: reclaimed %d message(s) of consumer %s (%s): %d to pending, %d dead-lettered",
                     item.queue, moved, item.consumer_id, item.reason, r.requeued, r.dead_lettered)
        return max(moved, 0)
