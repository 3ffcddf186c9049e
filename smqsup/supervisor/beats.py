"""Consumer liveness, supervisor side: every heartbeat_interval the parent
renews the heartbeat of each ready child, all queues in one pipelined call.

A child busy in C code holding the GIL is still alive and renewed; a
SIGSTOPped one is not, so its heartbeat lapses and the collector reclaims its
messages; one the collector already declared dead is stopped and replaced.
"""

from __future__ import annotations

import logging
import signal
import time

from smqsup import defaults
from smqsup.collector.collector import Collector
from smqsup.errors import BrokerError
from smqsup.keys import logical_name
from smqsup.logs import Lasting
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.store.scripts import Cancel
from smqsup.supervisor.consumers import Consumers
from smqsup.supervisor.protocol import SlotView, signal_child
from smqsup.supervisor.states import Child, StopReason

log = logging.getLogger(__name__)


class Heartbeats:
    """The parent's heartbeat sender. Not thread-safe."""

    def __init__(self, pool: Consumers, collector: Collector, trouble: Lasting) -> None:
        self.broker = pool.broker
        self.pool = pool
        self.collector = collector
        self._trouble = trouble
        self._next = 0.0
        self._next_look = 0.0
        self._flowing = False  # the last heartbeat reached Redis: only then look for cancels between them
        #: partition -> the newest cancel seen there (ms, Redis clock).
        self._cancels_seen: dict[str, float] = {}

    def tick(self, interval_s: float) -> None:
        """Renew every ready child's heartbeat once per ``interval_s``, and
        at once when a cancel was asked since the last look (every
        CANCEL_LOOK_S): the heartbeat is what finds the message in a
        consumer's list, so a running message is stopped within about that."""
        now = time.monotonic()
        if now < self._next and not self._cancel_asked(now):
            return
        self._next = now + interval_s
        beats: dict[str, list[tuple[str, ConsumerInfo]]] = {}
        for c in self.pool.children.values():
            # Ready by its own slot, whatever our state says: a ready child
            # that is stopping still gets its heartbeats until it exits.
            view = self.pool.slots.read(c.slot)
            if view.ready_us and not self.pool.sampler.is_stopped(c.pid):
                info = self._info(c, view)
                for p in self.pool.partitions(c.queue):  # registered in each
                    beats.setdefault(p, []).append((c.consumer_id, info))
        try:
            lost, refused, cancels = self.broker.registry.heartbeat(beats)
        except BrokerError as exc:
            self._trouble.report("heartbeats", "not sent", "heartbeats not sent: %s", exc)
            self.collector.redis_trouble()
            self._flowing = False
            return
        self._flowing = True
        self._trouble.clear("heartbeats", "heartbeats sent again")
        if refused and refused.keys() >= beats.keys():
            # Refused everywhere (OOM, most likely): other hosts' heartbeats
            # are refused as well, so reclaim nowhere for a while.
            self.collector.redis_trouble()
        self._refused(refused)
        self._lost(lost)
        self._cancel(cancels)

    def _cancel_asked(self, now: float) -> bool:
        """Whether a queue of ours has a cancel newer than the last seen
        (looked at most every CANCEL_LOOK_S; Redis trouble: no, the
        heartbeat says it). A cancel no consumer of ours holds makes one
        early heartbeat, not one per look."""
        if now < self._next_look or not self._flowing:
            return False
        self._next_look = now + defaults.CANCEL_LOOK_S
        if not any(self.pool.slots.read(c.slot).busy_since_us for c in self.pool.children.values()):
            # Nothing runs: a cancel can only concern a waiting message, which
            # its consumer screens out when it takes it (an idle supervisor
            # makes no look; one seen later makes one early heartbeat).
            return False
        partitions = [p for q in self.pool.queues for p in self.pool.partitions(q)]
        try:
            newest = self.broker.registry.newest_cancels(partitions)
        except BrokerError:
            self._flowing = False
            return False
        asked = [p for p, at in newest.items() if at > self._cancels_seen.get(p, 0.0)]
        self._cancels_seen.update(newest)
        return bool(asked)

    def _lost(self, lost: list[tuple[str, str]]) -> None:
        by_id = {c.consumer_id: c for c in self.pool.children.values()}
        for part, cid in lost:
            queue = logical_name(part)
            dead = by_id.get(cid)
            if dead is not None and not dead.stopping:
                # Not registered there: the collector declared it dead (and
                # requeued its messages), or the queue gained partitions since
                # it registered in those it had.
                log.warning("queue %s: consumer #%d (pid %d) is not registered in %s (declared dead by the "
                            "garbage collector, or the queue gained partitions since it started); replacing it",
                            queue, dead.index, dead.pid, part)
                self.pool.stop(dead, StopReason.DECLARED_DEAD)

    def _cancel(self, cancels: list[tuple[str, Cancel]]) -> None:
        """Children holding a message whose cancel was asked (said again each
        heartbeat while it is in their list). One running it one at a time
        (the oldest of its list, busy) is replaced: its reclaim dead-letters
        the message "cancelled". Any other is told (SIGUSR2) and stops it
        itself (consumer.request_cancels)."""
        by_id = {c.consumer_id: c for c in self.pool.children.values()}
        for part, (cid, mid, place) in cancels:
            c = by_id.get(cid)
            if c is None or c.stopping:
                continue
            if c.concurrency == 1 and place == 0 and self.pool.slots.read(c.slot).busy_since_us:
                log.warning("queue %s: message %s was cancelled while consumer #%d (pid %d) runs it; replacing "
                            "the consumer to stop its handler", logical_name(part), mid, c.index, c.pid)
                c.stopping_for(StopReason.CANCEL, None)
                signal_child(c.pid, signal.SIGKILL)
            else:
                signal_child(c.pid, signal.SIGUSR2)

    def _refused(self, refused: dict[str, str]) -> None:
        """Queues whose heartbeats Redis refused: said once per cause, and no
        reclaim there by our collector until they have flowed a while again."""
        for queue, text in refused.items():
            self.collector.redis_trouble(queue)
            self._trouble.report(("refused", queue), text, "queue %s: heartbeats refused (said again if the "
                                 "cause changes): %s", queue, text)
        for queue in {p for q in self.pool.queues for p in self.pool.partitions(q)} - refused.keys():
            self._trouble.clear(("refused", queue), "queue %s: heartbeats accepted again", queue)

    def _info(self, c: Child, view: SlotView) -> ConsumerInfo:
        """What a child's heartbeat carries: who it is, its resources, and its
        counters (``view``, its slot: no Redis call in the child for stats)."""
        now = time.monotonic()
        return ConsumerInfo(
            pid=c.pid, host=self.pool.host, queue=c.queue, index=c.index, supervisor=self.pool.pid,
            started_at=round(time.time() - (now - c.started_at), 3), cpu=round(c.cpu_percent, 1),
            rss=c.rss_bytes, uss=c.uss_bytes, busy=view.busy_since_us != 0, in_flight=view.in_flight,
            concurrency=c.concurrency, received=view.received,
            acked=view.acked, retried=view.retried, dead_lettered=view.dead_lettered, late_acks=view.late_acks,
            busy_s=round(view.busy_us / 1e6, 3), rate=c.meter.update(view.received))
