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
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
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

from smqsup import logs, message, safe

log = logging.getLogger(__name__)

#: messaging.system of every span (no registered value names smqsup).
SYSTEM = "smqsup"
#: The header of a dependency's child: the traceparents of its parents' send
#: spans (those its producer published), at most LINKS_MAX; its span links to them.
LINKS_HEADER = "smqsup-links"
LINKS_MAX = 32
#: Messages a traced producer remembers the send span of, for their children.
SENT_KEPT = 10_000
#: The longest exception text an "exception" event keeps, in characters.
EXCEPTION_CHARS = 1000
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


def _remote(parent: object, states: Optional[TraceState] = None) -> Optional[SpanContext]:
    """The span a W3C traceparent names, or None: only the grammar's form
    (version 00, lowercase hex, ids not all zero) is read."""
    if parent.__class__ is not str or len(parent) != 55 or not _TRACEPARENT.fullmatch(parent) \
            or not parent.startswith("00-"):
        return None
    text: str = parent
    trace_id, span_id = int(text[3:35], 16), int(text[36:52], 16)
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(int(text[53:55], 16) & 1),
                       trace_state=states)


def carried(headers: Mapping[str, Any]) -> Optional[otel_context.Context]:
    """The trace context ``headers`` carry, or None: a traceparent as
    _remote reads it, and a tracestate within bounds (its entries as the
    W3C grammar allows, else none)."""
    state = headers.get("tracestate")
    states = _state(state) if state.__class__ is str and len(state) <= TRACESTATE_CHARS_MAX else None
    remote = _remote(headers.get("traceparent"), states)
    return None if remote is None else trace.set_span_in_context(NonRecordingSpan(remote))


def links(headers: Mapping[str, Any]) -> Optional[list[Link]]:
    """The links of a dependency's child to its parents' send spans: the
    traceparents of LINKS_HEADER (a list of at most LINKS_MAX; anything
    else, or an entry not of the grammar, is left out)."""
    said = headers.get(LINKS_HEADER)
    if said.__class__ is not list or len(said) > LINKS_MAX:
        return None
    found = [Link(remote) for remote in map(_remote, said) if remote is not None]
    return found or None


class Sent:
    """The send spans of the messages a traced producer published last (at
    most SENT_KEPT, by id): what a child published with depends_on links
    to. Shared by the threads of one producer."""

    def __init__(self) -> None:
        self._spans: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, ids: list[str], traceparent: str) -> None:
        with self._lock:
            for mid in ids[-SENT_KEPT:]:
                self._spans[mid] = traceparent
            while len(self._spans) > SENT_KEPT:
                self._spans.popitem(last=False)

    def of(self, parents: Any) -> list[str]:
        """The traceparents of those of ``parents`` ((queue, id) pairs) it remembers."""
        if not isinstance(parents, (list, tuple)):
            return []
        with self._lock:
            found = [self._spans.get(pair[1]) for pair in parents if isinstance(pair, (tuple, list)) and len(pair) == 2
                     and isinstance(pair[1], str)]
        return [tp for tp in found if tp is not None][:LINKS_MAX]


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
    in the caller's current context, ended by ``done``, or by the error
    leaving its ``with`` block; ``sent`` remembers it for the messages'
    children (client/publishing.py UNTRACED is the same, doing nothing)."""

    def __init__(self, queue: str, sent: Sent) -> None:
        self.queue, self.sent = queue, sent
        self.traceparent = ""
        attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                                      "messaging.operation.name": "send", "messaging.destination.name": queue}
        try:
            self.span: Optional[Span] = _tracer().start_span(f"send {queue}", kind=SpanKind.PRODUCER,
                                                             attributes=attributes)
        except Exception as exc:  # noqa: BLE001 - a tracing failure never stops a publish
            _broke("a send span could not start", exc)
            self.span = None

    def headers(self, headers: Optional[Mapping[str, Any]], parents: Any = None) -> Any:
        """A copy of ``headers`` with this span's traceparent (and
        tracestate); with ``parents`` (depends_on), LINKS_HEADER: the send
        spans of those this producer published. Headers that are not a
        mapping are handed on as they are (the envelope refuses them)."""
        if headers is not None and not isinstance(headers, Mapping) or self.span is None:
            return headers
        out: dict[str, Any] = dict(headers) if headers is not None else {}
        out.pop("tracestate", None)  # (a caller's own would describe another span)
        out.pop(LINKS_HEADER, None)
        try:
            _W3C.inject(out, context=trace.set_span_in_context(self.span))
        except Exception as exc:  # noqa: BLE001 - a tracing failure never stops a publish
            _broke("a traceparent could not be made", exc)
        self.traceparent = str(out.get("traceparent", ""))
        linked = self.sent.of(parents) if parents is not None else None
        if linked:
            out[LINKS_HEADER] = linked
        return out

    def done(self, ids: list[str], many: bool = False) -> None:
        """The messages were sent: their ids (one publish: its id; many: their count)."""
        if self.span is None:
            return
        try:
            self.span.set_attribute("messaging.batch.message_count" if many else "messaging.message.id",
                                    len(ids) if many else ids[0] if ids else "")
            self.span.end()
        except Exception as exc:  # noqa: BLE001 - a tracing failure never stops a publish
            _broke("a send span could not end", exc)
        if self.traceparent:
            self.sent.remember(ids, self.traceparent)

    def __enter__(self) -> "Send":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Any) -> None:
        """A publish that raised: the span ends with the error (done() ended the others)."""
        if exc is not None:
            self.failed(exc)

    def failed(self, exc: BaseException) -> None:
        if self.span is None:
            return
        try:
            _exception(self.span, exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}"))
            self.span.set_attribute("error.type", type(exc).__qualname__)
            self.span.end()
        except Exception as broke:  # noqa: BLE001 - the publish's own error is the one raised
            _broke("a send span could not end", broke)


def process(msg: message.Message, partition: str,
            consumer_id: str) -> tuple[Optional[Span], Optional[otel_context.Context]]:
    """The CONSUMER span of one attempt of ``msg``, the child of the span
    its headers carry (else a root), and the context the handler runs in;
    (None, None) when tracing fails (logged once): the attempt runs untraced."""
    try:
        return _process(msg, partition, consumer_id)
    except Exception as exc:  # noqa: BLE001 - a tracing failure never stops a message
        _broke("an attempt's span could not start", exc)
        return None, None


def _process(msg: message.Message, partition: str, consumer_id: str) -> tuple[Span, otel_context.Context]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": msg.queue, "messaging.message.id": msg.id,
        "messaging.client.id": consumer_id, "smqsup.message.attempt": msg.attempts + 1}
    if partition != msg.queue:
        attributes["messaging.destination.partition.id"] = partition
    if msg.group is not None:
        attributes["smqsup.message.group"] = msg.group
    span = _tracer().start_span(f"process {msg.queue}", context=carried(msg.headers), kind=SpanKind.CONSUMER,
                                attributes=attributes, links=links(msg.headers) if msg.linked else None)
    return span, trace.set_span_in_context(span)


def attach(ctx: otel_context.Context) -> object:
    """Make ``ctx`` current on this thread or task; the token for detach."""
    return otel_context.attach(ctx)


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]


def ended(span: Span, attempts: int, error: Optional[BaseException], ok: bool, meta: str, threshold: int,
          delay_ms: int) -> None:
    """End an attempt's span with its outcome (worker/consumer_state.py Outcome):
    acked, or failed with the dead-letter reason, and then retried (after
    ``delay_ms``) or dead-lettered, as nack.lua decides it (the attempts
    would pass ``threshold``, or it is -1). Never raises: a failure is
    logged once, and the attempt's outcome stands."""
    try:
        _ended(span, attempts, error, ok, meta, threshold, delay_ms)
    except Exception as exc:  # noqa: BLE001 - a tracing failure never stops a message
        _broke("an attempt's span could not end", exc)


def _ended(span: Span, attempts: int, error: Optional[BaseException], ok: bool, meta: str, threshold: int,
           delay_ms: int) -> None:
    if error is not None:
        _exception(span, error)
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


def _exception(span: Span, error: BaseException) -> None:
    """The span's "exception" event: the type and the text, bounded and
    scrubbed of secrets (the SDK's record_exception reads str() unguarded
    and sends the traceback off the host)."""
    try:
        text = safe.scrub(str(error))[:EXCEPTION_CHARS]  # (scrubbed whole: a cut could split a secret)
    except Exception:  # noqa: BLE001 - an exception whose text raises
        text = "(its text could not be read)"
    span.add_event("exception", {"exception.type": type(error).__qualname__, "exception.message": text})


def _broke(what: str, exc: Exception) -> None:
    """Say once per process that tracing failed at ``what`` (the work goes on untraced)."""
    logs.warn_once(log, f"tracing:{what}", "tracing: %s (%s: %s); the work goes on untraced", what,
                   type(exc).__name__, safe.escape(repr(exc), 200))


def _reason(meta: str) -> str:
    """The dead-letter reason in an outcome's metadata (JSON text), bounded."""
    try:
        reason = json.loads(meta).get("reason", "failed")
    except (ValueError, AttributeError):
        reason = "failed"
    return str(reason)[:500]
