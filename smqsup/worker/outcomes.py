"""How a frame and its handler's end become an Outcome: malformed frames,
returns, Reject, Retry, failures and timeouts."""

from __future__ import annotations

import inspect
import logging
import traceback
from typing import Optional

from smqsup import defaults, message, safe
from smqsup.client import options
from smqsup.config.model import QueueConfig
from smqsup.errors import MalformedMessage, MessageError
from smqsup.store import scripts
from smqsup.worker.consumer_state import OK, Attempt, ConsumerStats, Identity, Outcome
from smqsup.worker.verdicts import Reject, Retry

log = logging.getLogger(__name__)

#: Longest traceback text kept in a dead letter, in characters.
_TRACEBACK_CHARS = 4000
#: Longest exception text kept in a dead letter (and its reason), in characters.
_ERROR_CHARS = 4000


def text_of(exc: BaseException) -> str:
    """An exception's text, bounded, secrets masked (safe.scrub: a Redis
    password, the web token): it is stored in a dead letter, which status,
    the API and the page show. Never raises."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails
        return f"<{type(exc).__name__}: str() failed>"
    # Scrubbed before the cut, so that no secret's head survives it.
    return safe.scrub(text[:2 * _ERROR_CHARS])[:_ERROR_CHARS]


def refuse_generator(result: object) -> None:
    """Raise TypeError (a failed attempt) when a handler returned a generator:
    its body never ran. (Generator functions are refused at import; this is
    a plain function that returned one, a decorator's, say.)"""
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        raise TypeError(f"the handler returned {type(result).__name__} {getattr(result, '__qualname__', '')!s}"
                        " without running it: a handler must return or raise, not yield")


def _about(msg: message.Message) -> dict[str, str]:
    """The ``extra`` of a log line about ``msg``: its JSON line names it (logs.py)."""
    return {"message_id": msg.id}


class OutcomeDecider:
    """Draws the Outcome of each frame, without talking to Redis (the
    settler records it): ``where`` in every call names the partition the
    frame came from, the queue of the log lines."""

    def __init__(self, queue: QueueConfig, identity: Identity, stats: ConsumerStats) -> None:
        self.queue = queue
        self.identity = identity
        self.stats = stats

    def malformed(self, exc: MalformedMessage, where: str) -> Outcome:
        """The outcome of a frame message.decode refused with ``exc``: it
        holds no message, and is dead-lettered "malformed" at once."""
        self.stats.malformed += 1
        log.error("queue %s: malformed message dead-lettered (%s)", where, exc)
        meta = scripts.meta_json("malformed", error=text_of(exc), consumer=self.identity.consumer_id)
        return Outcome(False, meta, threshold=-1)

    def ended(self, msg: "message.Message | None", exc: "BaseException | None", where: str) -> Outcome:
        """The outcome of a handler that returned (``exc`` None) or raised
        ``exc`` (``msg``: what it ran, never None once it ran). SystemExit
        and KeyboardInterrupt are raised again: the process ends, its list
        is reclaimed. Any other BaseException (a CancelledError none of our
        timeouts caused, GeneratorExit...) is a failed attempt."""
        if exc is None:
            return OK
        assert msg is not None
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            raise exc
        if isinstance(exc, Exception):
            return self.judged(msg, exc, where)
        text = safe.escape(exc, 500)  # (never raises, whatever its __str__ does)
        return self.judged(msg, RuntimeError(f"the handler raised {type(exc).__name__}: {text}"), where)

    def drawn(self, att: Attempt, where: str) -> Outcome:
        """The outcome of a handler that ended: ended()'s, or a tracked
        message's that returned: done with its result as JSON text, or a
        failed attempt when the result is not JSON (NaN, too deep, not
        serialisable, a lone surrogate) or larger than RESULT_MAX_BYTES."""
        msg = att.msg
        if att.cancelled and msg is not None:
            return self.cancelled(msg, where)
        if att.error is not None or msg is None:
            return self.ended(msg, att.error, where)
        try:
            return Outcome(True, result=message.bounded_json(att.result, "the handler's result",
                                                             defaults.RESULT_MAX_BYTES))
        except MessageError as exc:
            return self.judged(msg, exc, where)

    def judged(self, msg: message.Message, exc: Exception, where: str) -> Outcome:
        """The outcome of a handler that raised ``exc``: a dead letter now
        (Reject) or a failed attempt. Whatever goes wrong while judging it
        (a Reject or Retry subclass that skipped its ``__init__``, a delay
        set to NaN afterwards, an exception whose attributes raise) is a
        failed attempt too: an outcome that cannot be drawn must never leave
        its message unsettled in our list, where a graceful stop would hand
        it back free for ever."""
        try:
            return self._rejected(msg, exc, where) if isinstance(exc, Reject) else self._failure(msg, exc, where)
        except Exception as failed:  # noqa: BLE001 - see the docstring
            text = f"{type(exc).__name__} could not be judged ({type(failed).__name__}: {text_of(failed)})"
            log.error("queue %s: message %s: %s; counted as a failed attempt", where, msg.id, safe.scrub(text),
                      extra=_about(msg))
            q = self.queue
            meta = scripts.meta_json(safe.scrub(text), error_type=type(exc).__name__, message_id=msg.id,
                                     consumer=self.identity.consumer_id)
            return Outcome(False, meta, threshold=q.retry_threshold, delay_ms=int(q.retry_delay_s * 1000))

    def timed_out(self, msg: message.Message, where: str, what_now: str) -> Outcome:
        """A message past message_timeout: a failed attempt, reason "timeout";
        ``what_now`` says what becomes of its handler."""
        log.warning("queue %s: message %s ran past message_timeout %gs; %s", where, msg.id,
                    self.queue.message_timeout_s, what_now, extra=_about(msg))
        text = f"message_timeout {self.queue.message_timeout_s:g}s passed"
        failed = self._failure(msg, TimeoutError(text), where)
        meta = scripts.meta_json("timeout", error_type="TimeoutError", error=text, message_id=msg.id,
                                 consumer=self.identity.consumer_id)
        return Outcome(False, meta, threshold=failed.threshold, delay_ms=failed.delay_ms)

    def cancelled(self, msg: message.Message, where: str) -> Outcome:
        """A message whose cancel was asked: dead-lettered "cancelled" now,
        whatever its handler did, never retried."""
        log.info("queue %s: message %s cancelled", where, msg.id, extra=_about(msg))
        return self.cancelled_frame(msg.id)

    def cancelled_frame(self, message_id: Optional[str], started: bool = True) -> Outcome:
        """The outcome of a cancelled message: its attempt counted if it was
        ``started`` (as a failure's is), not if it never ran (nack.lua's -2)."""
        meta = scripts.meta_json("cancelled", message_id=message_id, consumer=self.identity.consumer_id)
        return Outcome(False, meta, threshold=-1 if started else -2, dead_event="cancelled")

    def _rejected(self, msg: message.Message, exc: Reject, where: str) -> Outcome:
        """Reject: dead-letter now, whatever the attempts."""
        self.stats.rejected += 1
        reason = text_of(exc)
        log.warning("queue %s: message %s rejected by its handler: %s", where, msg.id, reason, extra=_about(msg))
        meta = scripts.meta_json(f"rejected: {reason}", error_type="Reject", error=reason, message_id=msg.id,
                                 consumer=self.identity.consumer_id)
        return Outcome(False, meta, threshold=-1, dead_event="rejected")

    def _failure(self, msg: message.Message, exc: Exception, where: str) -> Outcome:
        kind = type(exc).__name__
        text = text_of(exc)
        log.warning("queue %s: message %s failed on attempt %d: %s: %s", where, msg.id, msg.attempts + 1, kind, text,
                    extra=_about(msg))
        try:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            tb = safe.scrub(tb[-2 * _TRACEBACK_CHARS:])[-_TRACEBACK_CHARS:]
        except Exception:  # noqa: BLE001 - a traceback that cannot be formatted is left out
            tb = ""
        meta = scripts.meta_json(f"{kind}: {text}", error_type=kind, error=text, message_id=msg.id,
                                 consumer=self.identity.consumer_id, traceback=tb)
        return Outcome(False, meta, threshold=self.queue.retry_threshold,
                       delay_ms=int(self._retry_delay_s(msg, exc, where) * 1000))

    def _retry_delay_s(self, msg: message.Message, exc: Exception, where: str) -> float:
        """A Retry's own delay when it holds one Retry would accept (finite,
        0 to ten years: a subclass may have skipped Retry's checks, or set
        it afterwards); else the queue's retry_delay, backed off."""
        q = self.queue
        if isinstance(exc, Retry):
            delay_s = getattr(exc, "delay_s", None)
            if isinstance(delay_s, (int, float)) and not isinstance(delay_s, bool) \
                    and 0 <= delay_s <= options.MAX_SPAN_S:  # (NaN fails both)
                return float(delay_s)
            log.warning("queue %s: message %s: %s.delay_s is not a delay (%s); the queue's retry_delay applies",
                        where, msg.id, type(exc).__name__, safe.escape(repr(delay_s), 100), extra=_about(msg))
        try:
            return float(min(q.retry_delay_s * (q.retry_backoff ** min(msg.attempts, 1000)), q.retry_delay_max_s))
        except OverflowError:
            return q.retry_delay_max_s
