"""``smqsup consume``: one consumer in the foreground, without a supervisor."""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import Optional

from smqsup import logs
from smqsup.config.model import Config, QueueConfig
from smqsup.launch.embedded import ensure_server
from smqsup.store.broker import Broker
from smqsup.worker.consumer import Consumer
from smqsup.worker.fetching import fetch_block_s
from smqsup.worker.handlers import import_handler
from smqsup.worker.heartbeat import LivenessThread
from smqsup.worker.process_hooks import with_hooks

log = logging.getLogger(__name__)


def consume(cfg: Config, queue: str) -> int:
    """Run one consumer of ``queue`` until a signal stops it; exit status.

    It owns the embedded redis-server when its config names none and none is
    running. Signals: SIGTERM or SIGINT stop after the message in hand; a
    second SIGINT interrupts the handler, and the interrupted message goes
    back to pending without costing an attempt."""
    qcfg = cfg.queues[queue]
    logs.set_context(queue=queue)
    handler = with_hooks(import_handler(qcfg.handler, path=str(cfg.path), key=f"queues.{queue}.handler"), qcfg,
                         path=str(cfg.path))
    url, server = ensure_server(cfg)
    broker = Broker(url, cfg.namespace, client_name=f"smqsup-consume-{queue}",
                    wait_replicas=cfg.redis.wait_replicas, wait_timeout_s=cfg.redis.wait_timeout_s)
    consumer = Consumer(broker, qcfg, handler, fetch_block_s=fetch_block_s(cfg))
    liveness = LivenessThread(url, cfg, consumer)
    _stop_on_signals(consumer)
    try:
        for warning in broker.check_server():
            log.warning("%s", warning)
        log.info("queue %s: consumer %s started (%s)", queue, consumer.consumer_id, qcfg.handler)
        liveness.start()
        reason = _run(broker, consumer, qcfg)
        log.info("queue %s: consumer %s %s after %d message(s)", queue, consumer.consumer_id, reason,
                 consumer.stats.received)
    finally:
        if liveness.is_alive():
            liveness.stop()
        broker.close()
        if server is not None:
            server.stop()
    return 0


def _stop_on_signals(consumer: Consumer) -> None:
    """SIGTERM or SIGINT: ``consumer`` stops after the message in hand; a
    second SIGINT raises KeyboardInterrupt in the handler itself."""
    signals = {"count": 0}

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        # Only record; the loop stops between messages. A second SIGINT
        # interrupts the handler itself.
        signals["count"] += 1
        consumer.request_stop()
        if signum == signal.SIGINT and signals["count"] > 1:
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _run(broker: Broker, consumer: Consumer, qcfg: QueueConfig) -> str:
    """``consumer.run()``'s stop reason; when a second SIGINT interrupted the
    handler, its message is back in pending without costing an attempt."""
    try:
        return consumer.run()
    except KeyboardInterrupt:
        r = broker.messages.return_stopped(qcfg.name, consumer.consumer_id, reason="interrupted")
        log.warning("queue %s: interrupted; %d message(s) returned to pending", qcfg.name, r.requeued)
        return "interrupted"
