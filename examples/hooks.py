"""Example hooks (README "Hooks"): where a message came from, and how long
each handler run took.

    Producer.from_config("examples/queues.yaml", hooks=[Origin()])   # examples/producer.py
    queues: {orders: {hooks: [examples.hooks:Timing]}}               # examples/queues.yaml
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from smqsup import Message

log = logging.getLogger(__name__)


class Origin:
    """A publish hook: the host and pid that published each message, in its headers."""

    def __init__(self) -> None:
        self.origin = f"{socket.gethostname()}:{os.getpid()}"

    def before_publish(self, queue: str, body: Any, headers: dict[str, Any]) -> None:
        headers.setdefault("origin", self.origin)


class Timing:
    """Process hooks: each run's time and outcome, one log line per message.
    One instance serves every message of its consumer (threads and tasks
    too), so the start times are kept by message id."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    def before_process(self, message: Message) -> None:
        self.started[message.id] = time.monotonic()

    def after_process(self, message: Message, result: Any, error: BaseException | None) -> None:
        took_ms = (time.monotonic() - self.started.pop(message.id, time.monotonic())) * 1000
        outcome = "ok" if error is None else f"{type(error).__name__}"
        log.info("queue %s: message %s from %s: %s in %.1f ms", message.queue, message.id,
                 message.headers.get("origin", "?"), outcome, took_ms)
