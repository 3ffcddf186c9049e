"""OpenTelemetry traces (``pip install 'smqsup[otel]'``; ``tracing: true``, or
``Producer(tracing=True)``), on the tracer provider the process configured:

    publish ─▶ PRODUCER span "send QUEUE" ─▶ traceparent, tracestate in each message's headers
        ... ─▶ consumer ─▶ CONSUMER span "process QUEUE" per attempt, the child of that span
               (attributes: OpenTelemetry's messaging conventions; its end: acked, retried,
               dead-lettered with the reason, timed out, cancelled)

Only what the W3C Trace Context grammar allows is read from a message:
a ``traceparent`` of exactly 55 characters of its form and a ``tracestate``
of at most 512; anything else in those headers (huge, nested, not text,
malformed) is ignored, and the attempt's span starts a trace of its own.

Imported only where tracing is on: a process without it imports nothing
of OpenTelemetry and pays nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from smqsup import message

#: messaging.system of every span (no registered value names smqsup).
SYSTEM = "smqsup"
#: The longest tracestate read from a message (W3C: 512 characters at most).
TRACESTATE_CHARS_MAX = 512
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
#: A tracestate list member (W3C Trace Context: a simple or tenant@system
#: key, "=", a value of printable ASCII but "," and "="), and the most members.
_STATE_MEMBER = re.compile(r"([a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
                           r"=([\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e])")
TRACESTATE_MEMBERS_MAX = 32
_W3C = TraceContextTextMapPropagator()


_TRACER: Optional[trace.Tracer] = None


def _tracer() -> trace.Tracer:
    """smqsup's tracer, got once (get_tracer costs more than a span): the
    API's proxy until a provider is set, which then follows that provider."""
    global _TRACER
    if _TRACER is None:
        _TRACER = trace.get_tracer("smqsup")
    return _TRACER


def carried(headers: Mapping[str, Any]) -> Optional[otel_context.Context]:
    """The trace context ``headers`` carry, or None: only a well-formed W3C
    traceparent (version 00, ids not all zero) is read, and a tracestate
    within bounds (its entries as the W3C grammar allows, else none)."""
    parent = headers.get("traceparent")
    if parent.__class__ is not str or len(parent) != 55 or not _TRACEPARENT.fullmatch(parent) \
            or not parent.startswith("00-"):
        return None
    trace_id, span_id = int(parent[3:35], 16), int(parent[36:52], 16)
    if not trace_id or not span_id:
        return None
    state = headers.get("tracestate")
    states = _state(state) if state.__class__ is str and len(state) <= TRACESTATE_CHARS_MAX else None
    remote = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(parent[53:55], 16) & 1),
                         trace_state=states)
    return trace.set_span_in_context(NonRecordingSpan(remote))


def _state(text: str) -> Optional[TraceState]:
    """A tracestate's members, or None where any is not of the grammar
    (or a key repeats, or there are too many): then none is kept."""
    pairs: dict[str, str] = {}
    for member in text.split(","):
        member = member.strip(" \t")
        if not member:
            continue
        match = _STATE_MEMBER.fullmatch(member)
        if match is None or match[1] in pairs or len(pairs) == TRACESTATE_MEMBERS_MAX:
            return None
        pairs[match[1]] = match[2]
    return TraceState(list(pairs.items()))


class Send:
    """The PRODUCER span of one publish call (its messages share it): made
    in the caller's current context, ended by ``done`` or ``failed``."""

    def __init__(self, queue: str) -> None:
        attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                                      "messaging.operation.name": "send", "messaging.destination.name": queue}
        self.span = _tracer().start_span(f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes)

    def headers(self, headers: Optional[Mapping[str, Any]]) -> dict[str, Any]:
        """A copy of ``headers`` with this span's traceparent (and tracestate)."""
        out: dict[str, Any] = dict(headers) if headers is not None else {}
        out.pop("tracestate", None)  # (a caller's own would describe another span)
        _W3C.inject(out, context=trace.set_span_in_context(self.span))
        return out

    def done(self, ids: list[str], many: bool = False) -> None:
        """The messages were sent: their ids (one publish: its id; many: their count)."""
        if many:
            self.span.set_attribute("messaging.batch.message_count", len(ids))
        elif ids:
            self.span.set_attribute("messaging.message.id", ids[0])
        self.span.end()

    def failed(self, exc: BaseException) -> None:
        self.span.record_exception(exc)
        self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}"))
        self.span.set_attribute("error.type", type(exc).__qualname__)
        self.span.end()


def process(msg: message.Message, partition: str, consumer_id: str) -> tuple[Span, otel_context.Context]:
    """The CONSUMER span of one attempt of ``msg``, the child of the span
    its headers carry (else a root), and the context the handler runs in."""
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": msg.queue, "messaging.message.id": msg.id,
        "messaging.client.id": consumer_id, "smqsup.message.attempt": msg.attempts + 1}
    if partition != msg.queue:
        attributes["messaging.destination.partition.id"] = partition
    if msg.group is not None:
        attributes["smqsup.message.group"] = msg.group
    span = _tracer().start_span(f"process {msg.queue}", context=carried(msg.headers), kind=SpanKind.CONSUMER,
                                attributes=attributes)
    return span, trace.set_span_in_context(span)


def attach(ctx: otel_context.Context) -> object:
    """Make ``ctx`` current on this thread or task; the token for detach."""
    return otel_context.attach(ctx)


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


def ended(span: Span, attempts: int, error: Optional[BaseException], ok: bool, meta: str, threshold: int,
          delay_ms: int) -> None:
    """End an attempt's span with its outcome (worker/records.py Outcome):
    acked, or failed with the dead-letter reason, and then retried (after
    ``delay_ms``) or dead-lettered, as nack.lua decides it (the attempts
    would pass ``threshold``, or it is -1)."""
    if error is not None:
        span.record_exception(error)
    if ok:
        span.set_attribute("smqsup.outcome", "acked")
        span.end()
        return
    reason = _reason(meta)
    dead = threshold < 0 or attempts + 1 > threshold
    span.set_attribute("smqsup.outcome", "dead_lettered" if dead else "retried")
    span.set_attribute("error.type", type(error).__qualname__ if error is not None else reason.split(":")[0][:64])
    if dead:
        span.add_event("dead_lettered", {"smqsup.reason": reason})
    else:
        span.add_event("retry", {"smqsup.retry_delay_ms": delay_ms})
    span.set_status(Status(StatusCode.ERROR, reason))
    span.end()


def _reason(meta: str) -> str:
    """The dead-letter reason in an outcome's metadata (JSON text), bounded."""
    try:
        reason = json.loads(meta).get("reason", "failed")
    except (ValueError, AttributeError):
        reason = "failed"
    return str(reason)[:500]
