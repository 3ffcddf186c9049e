"""Handlers of the supervised tracing tests: importing this module sets the
consumer process's tracer provider (spans to $SMQSUP_TEST_SPANS)."""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace

from tests.support.otel_setup import to_files

to_files()


def work(message: Any) -> Any:
    """An inner span (the attempt's child), a log line; fails while its body says so."""
    logging.getLogger("tests.otel").warning("working on %s", message.id)
    with trace.get_tracer("tests").start_as_current_span("work"):
        body = message.body if isinstance(message.body, dict) else {}
        if message.attempts < body.get("fail", 0):
            raise RuntimeError(f"failing attempt {message.attempts + 1}")
        return {"traceparent": message.headers.get("traceparent")}
