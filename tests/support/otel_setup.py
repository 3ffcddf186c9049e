"""OpenTelemetry's SDK for the tracing tests: in this process, spans kept
in memory (``MEMORY``); in a supervised consumer or a producer script,
``to_files()`` exports each ended span as one JSON line to a file of its
own process under $SMQSUP_TEST_SPANS."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

MEMORY = InMemorySpanExporter()


class FileExporter(SpanExporter):
    """Each span, as it ends, one compact JSON line in DIR/PID.jsonl."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(os.path.join(self.directory, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
            for span in spans:
                f.write(json.dumps(json.loads(span.to_json())) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """(Nothing held.)"""


def in_memory() -> InMemorySpanExporter:
    """This process's provider, exporting to MEMORY (set once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(MEMORY))
        trace.set_tracer_provider(provider)
    return MEMORY


def to_files() -> None:
    """This process's provider, exporting to $SMQSUP_TEST_SPANS."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["SMQSUP_TEST_SPANS"])))
    trace.set_tracer_provider(provider)


def read_spans(directory: Path) -> list[dict[str, Any]]:
    """Every span exported under ``directory``, with the pid that exported it."""
    spans = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.endswith("}"):
                span = json.loads(line)
                span["pid"] = int(path.stem)
                spans.append(span)
    return spans
