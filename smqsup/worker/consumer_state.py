"""The plain records a consumer's parts share: who it is, what it has done, one
message from its take to its settle, and what becomes of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from smqsup import message

Handler = Callable[[message.Message], Any]
#: Called with True as a frame is about to start (before it is decoded: the
#: supervisor's slot must count it started before anything of it runs), then
#: with False once outcomes are drawn or recorded in Redis (or could not be).
BusyHook = Callable[[bool], None]
#: Called when the consumer, nothing in hand, is about to wait for the queue
#: (a blocking fetch): at most once a blocking fetch, never per message.
IdleHook = Callable[[], None]


class Identity:
    """Who the consumer is in Redis. ``lost``: the collector declared it
    dead (a script or a heartbeat said so); the engine then stops or renews
    the id. Every part reads ``consumer_id`` here, never a copy of it."""

    __slots__ = ("consumer_id", "registered", "lost")

    def __init__(self, consumer_id: str) -> None:
        self.consumer_id = consumer_id
        self.registered = False  # entered the registry: heartbeats may flow
        self.lost = False


@dataclass
class ConsumerStats:
    """What this consumer has done since it started (flushed by the stats layer)."""

    received: int = 0
    acked: int = 0
    retried: int = 0  # nacked back to pending or the delayed set
    dead_lettered: int = 0
    malformed: int = 0
    late_acks: int = 0  # settled after the message had been reclaimed
    expired: int = 0  # taken by a blocking fetch past their ttl: dead-lettered unhandled
    rejected: int = 0  # handlers raised Reject
    busy_s: float = 0.0  # total time spent in the handler


@dataclass(frozen=True)
class Outcome:
    """What should happen to a frame once its handler has run."""

    ok: bool
    meta: str = ""  # dead-letter metadata (failures only)
    threshold: int = 0  # retry_threshold, or -1 to dead-letter at once (-2: without an attempt, never started)
    delay_ms: int = 0
    dead_event: str = ""  # a counter to add 1 to when dead-lettered ("rejected")
    result: Optional[str] = None  # a tracked message's result, JSON text (ok only)


class ExitAfterSettling(BaseException):
    """Raised by the hooks' stack (worker/process_hooks.py) in place of the attempt's
    own end when an after_process raised SystemExit or KeyboardInterrupt:
    the attempt ends as ``result``/``failed`` say (settled once, as without
    the hook's exit), then the consumer stops gracefully and ``Consumer.run``
    raises ``exit``. A BaseException, so no ``except Exception`` of user
    code between the stack and the runner swallows it."""

    def __init__(self, result: Any, failed: Optional[BaseException], exit: BaseException) -> None:
        super().__init__(exit)
        self.result = result
        self.failed = failed
        self.exit = exit


#: The outcome of a handler that returned (a message not tracked: a frame that is not plain, with events or
#: links, ends in the ack's script all the same, ack.lua or take.lua).
OK = Outcome(True)


class Attempt:
    """One message from its take to its settle: the frame (its identity in
    the processing list), the decoded message (None: malformed, never run),
    when its handler started, how it ended and what becomes of it."""

    __slots__ = ("frame", "msg", "since_us", "error", "outcome", "task", "result", "cancelled", "span", "trace")

    def __init__(self, frame: bytes, msg: Optional[message.Message], since_us: int = 0,
                 outcome: Optional[Outcome] = None) -> None:
        self.frame = frame
        self.msg = msg
        self.since_us = since_us  # monotonic µs at its start: busy_s, the supervisor's stuck-loop clock
        self.error: Optional[BaseException] = None  # what its handler raised
        self.outcome = outcome  # set once it is due to be settled
        self.task: Optional["asyncio.Task[None]"] = None  # an async handler's task (runners.LoopRunner)
        self.result: Any = None  # what its handler returned (recorded when the message is tracked)
        self.cancelled = False  # its cancel was asked: it ends in the dead letters, "cancelled"
        self.span: Any = None  # tracing on: its CONSUMER span (smqsup/tracing.py), ended with its outcome
        self.trace: Any = None  # and the context its handler runs in

    def exit_asked(self) -> Optional[BaseException]:
        """An after_process hook asked the process to exit (the error is an
        ExitAfterSettling): the attempt's own end put back in its place;
        the exit it asked for. Else None."""
        wrapped = self.error
        if not isinstance(wrapped, ExitAfterSettling):
            return None
        self.error, self.result = wrapped.failed, wrapped.result
        return wrapped.exit

    def end_span(self) -> None:
        """End the attempt's span with its outcome (tracing on; once)."""
        from smqsup import tracing  # (imported only where tracing is on)

        span, self.span = self.span, None
        o, msg = self.outcome, self.msg
        if span is not None and o is not None and msg is not None:
            tracing.ended(span, msg.attempts, self.error, o.ok, o.meta, o.threshold, o.delay_ms)
