"""Liveness of a consumer that runs without a supervisor: a thread that
renews its heartbeat every heartbeat_interval and takes part in the
collector election."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import psutil

from smqsup.collector.collector import Collector
from smqsup.config.model import Config
from smqsup.errors import BrokerError
from smqsup.logs import Lasting
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo, RateMeter
from smqsup.worker.consumer import Consumer

log = logging.getLogger(__name__)

#: How often the thread wakes to see whether something is due, in seconds.
_TICK_S = 0.05


class LivenessThread(threading.Thread):
    """Heartbeats for one in-process consumer, plus a Collector.

    Under a supervisor this is not used: the parent renews every child's
    heartbeat (arbiter.py), so handler code that holds the GIL cannot starve
    it. Here a handler holding the GIL for longer than heartbeat_timeout (a
    long C call) does starve the thread, and the collector then declares the
    consumer dead: run such handlers under the supervisor."""

    def __init__(self, url: str, cfg: Config, consumer: Consumer) -> None:
        super().__init__(name="smqsup-liveness", daemon=True)
        self.cfg = cfg
        self.consumer = consumer
        # Its own connection: the consumer's may be blocked in BLMOVE.
        self.broker = Broker(url, cfg.namespace, client_name="smqsup-liveness",
                             wait_replicas=cfg.redis.wait_replicas, wait_timeout_s=cfg.redis.wait_timeout_s)
        self.collector = Collector(self.broker, cfg)
        self._stop_event = threading.Event()
        self._proc = psutil.Process()
        self._started_at = time.time()
        self._meter = RateMeter()
        self._trouble = Lasting(log)

    def stop(self) -> None:
        """Stop the thread, release the collector locks, close the connection."""
        self._stop_event.set()
        self.join(5)

    def run(self) -> None:
        next_beat = 0.0
        while not self._stop_event.wait(_TICK_S):
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + self.cfg.heartbeat_interval_s
                self._beat()
            self.collector.tick()
        self.collector.release_all()
        self.broker.close()

    def _beat(self) -> None:
        c = self.consumer
        if not c.registered:
            return
        info = [(c.consumer_id, self._info())]
        try:
            # Registered in every partition of the queue: renewed in each.
            lost, refused, cancels = self.broker.registry.heartbeat({name: info for name in c.partitions.names})
        except BrokerError as exc:
            refused, cancels = {c.name: str(exc)}, []
        if refused:
            # Our heartbeat lapses: the collector here must not take that (or
            # everyone's, under OOM) for a death, while its reads still work.
            self.collector.redis_trouble()
            where, text = next(iter(refused.items()))
            self._trouble.report("heartbeat", "not sent", "queue %s: heartbeat not sent: %s", where, text)
            return
        self._trouble.clear("heartbeat", "queue %s: heartbeats sent again", c.name)
        for _, cid in lost:
            c.identity_lost(cid)
        if cancels:  # (a handler running inline goes on: only a supervisor can stop it)
            c.request_cancels()

    def _info(self) -> ConsumerInfo:
        st = self.consumer.stats
        return ConsumerInfo(
            pid=os.getpid(), host=socket.gethostname(), queue=self.consumer.queue.name, started_at=self._started_at,
            cpu=self._proc.cpu_percent(None), rss=self._proc.memory_info().rss, busy=self.consumer.busy,
            in_flight=self.consumer.flight()[0], concurrency=self.consumer.concurrency, received=st.received,
            acked=st.acked, retried=st.retried, dead_lettered=st.dead_lettered,
            late_acks=st.late_acks, busy_s=round(st.busy_s, 3), rate=self._meter.update(st.received))
