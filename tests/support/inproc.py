"""A consumer and a collector running in threads of the test process, and
the fixtures that start them: the queue core tested without a supervisor."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smqsup.collector.collector import Collector
from smqsup.config.model import Config, QueueConfig
from smqsup.store.broker import Broker
from smqsup.worker.consumer import Consumer
from smqsup.worker.process_hooks import with_hooks

NS = "smq"


class Running:
    """A consumer (sequential, or concurrent when ``qcfg.concurrency`` > 1)
    running in a thread of the test process, with a garbage collector (which
    promotes delayed retries) in another."""

    def __init__(self, url: str, qcfg: QueueConfig, handler: Callable[[Any], Any],
                 fetch_block_s: float = 0.2) -> None:
        self.consumer = Consumer(Broker(url, NS), qcfg, with_hooks(handler, qcfg), fetch_block_s=fetch_block_s)
        self.collector = Collector(Broker(url, NS), Config(Path("<test>"), queues={qcfg.name: qcfg}))
        self._stop = threading.Event()
        self.threads = [threading.Thread(target=self.consumer.run, daemon=True),
                        threading.Thread(target=self._collect, daemon=True)]
        for t in self.threads:
            t.start()

    def _collect(self) -> None:
        while not self._stop.wait(0.02):
            self.collector.tick()
        self.collector.release_all()

    def stop(self) -> None:
        self.request_stop()
        self.join()

    def request_stop(self) -> None:
        """Ask both threads to stop; ``join()`` waits for them (several stop at once)."""
        self.consumer.request_stop()
        self._stop.set()

    def join(self) -> None:
        for t in self.threads:
            t.join(10)
            assert not t.is_alive(), "consumer did not stop"
