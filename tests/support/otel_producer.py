"""A producer process for the tracing tests: inside a span "request", it
publishes each body given (JSON) to the queue given, with tracing on; with
the one body "flow", two tracked parents and a child depending on both.

    python -m tests.support.otel_producer URL QUEUE BODY...
    python -m tests.support.otel_producer URL QUEUE flow
"""

from __future__ import annotations

import json
import sys

from opentelemetry import trace

from smqsup import Producer
from tests.support.otel_setup import to_files


def main(url: str, queue: str, bodies: list[str]) -> None:
    to_files()
    with trace.get_tracer("tests").start_as_current_span("request"), Producer(url, tracing=True) as producer:
        if bodies == ["flow"]:
            parents = [producer.publish(queue, {"parent": n}, result_ttl=60) for n in (1, 2)]
            child = producer.publish(queue, {"child": True}, depends_on=[(queue, mid) for mid in parents])
            print(*parents, child, flush=True)
            return
        for body in bodies:
            print(producer.publish(queue, json.loads(body)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
