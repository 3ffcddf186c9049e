"""What a handler may raise to say what becomes of its message, beyond
returning (ack) and raising anything else (a failed attempt, retried after
the queue's retry_delay while attempts remain): Reject and Retry."""

from __future__ import annotations

import datetime as dt
from typing import Any

from smqsup.client import options


class Reject(Exception):
    """Dead-letter the message now, whatever its attempts: retrying cannot
    help. The dead letter's reason is ``rejected: <reason>``.

        from smqsup import Reject, Retry

        def handle(message):
            if not valid(message.body):
                raise Reject("no such customer")      # dead-letter now, whatever the attempts
            if rate_limited():
                raise Retry(delay=30)                 # a failed attempt, retried in 30 s
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = str(reason)


class Retry(Exception):
    """Count a failed attempt and retry after ``delay`` (seconds or a
    timedelta, 0 to ten years) instead of the queue's retry_delay; past
    retry_threshold the message is dead-lettered as for any failure. A bad
    delay raises MessageError where the Retry is made (so the handler fails
    with that error instead)."""

    def __init__(self, delay: "float | dt.timedelta" = 0.0, reason: str = "") -> None:
        self.delay_s = options.seconds(delay, "Retry(delay=...)", zero_ok=True)
        super().__init__(reason or f"retry in {self.delay_s:g} s")
        self.reason = str(reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Retry, (self.delay_s, self.reason))
