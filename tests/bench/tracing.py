"""What OpenTelemetry tracing costs (README "Tracing"): tracing off against
on, ABBA in one run, on one private redis-server.

    SMQSUP_BENCH_TCP=1 python tests/bench/tracing.py [--messages 20000] [--repeats 2]

"on" is the OpenTelemetry SDK (a TracerProvider with a BatchSpanProcessor)
exporting to a no-op exporter, in the producer and in the consumer process:

- publishing: the median µs of ``--single`` single ``publish`` calls (the
  two kinds interleaved call by call), and ``publish_many`` of
  ``--publish-many`` messages (msg/s);
- consuming: one consumer process (no-op handler, ``tracing`` off or on)
  draining ``--messages`` messages, published by a producer with tracing
  off or on as well (so that "on" reads a traceparent from every message),
  timed from the first take to the last (msg/s), and the µs per message
  the spans add: 1/on - 1/off.

Run it on a commit and its parent (ABBA) to see that "off" did not change.
SMQSUP_BENCH_SIMPLE=1: a SimpleSpanProcessor instead (each span exported
as it ends, no thread); SMQSUP_BENCH_PROFILE=PATH: cProfile the "on"
consumer into PATH.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from typing import Any

import redis
from _common import Children, bench_server, machine, median, run_consumer, transport, wait_ready  # noqa: I001 - _common puts the repo on sys.path first

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys

NAMESPACE = "smq"


def with_sdk() -> None:
    """This process's tracer provider: the SDK, spans batched to a no-op exporter."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Nothing(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    if os.environ.get("SMQSUP_BENCH_SIMPLE") == "1":  # (spans exported as they end, on the caller's thread)
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        provider.add_span_processor(SimpleSpanProcessor(Nothing()))
    else:
        provider.add_span_processor(BatchSpanProcessor(Nothing()))
    trace.set_tracer_provider(provider)


def noop(message: Any) -> None:
    """The handler: nothing."""


def consumer(url: str, queue: str, tracing: bool) -> None:
    """A forked consumer: the SDK set before the fork is this process's too
    (its batch processor starts a new thread here, as the SDK does at fork)."""
    if tracing:
        run_consumer(url, queue, noop, os.environ.get("SMQSUP_BENCH_PROFILE"), tracing=True)
    else:  # (no tracing keyword: the script also runs on commits before it)
        run_consumer(url, queue, noop)


def drain(url: str, client: "redis.Redis[bytes]", n: int, tracing: bool) -> float:
    """msg/s of one consumer draining ``n`` messages (tracing on or off for
    both sides): published to a staging queue, moved into the consumer's
    queue with one RENAME once it waits, timed until it acked them all."""
    queue = f"q{time.monotonic_ns()}"
    keys, stage = QueueKeys(NAMESPACE, queue), QueueKeys(NAMESPACE, f"stage-{queue}")
    with Producer(url, NAMESPACE, tracing=tracing) as p:
        for start in range(0, n, 1000):
            p.publish_many(f"stage-{queue}", list(range(start, min(n, start + 1000))))
    children = Children()
    children.start(consumer, url, queue, tracing)
    wait_ready(client, keys.consumers, 1, children=children)
    began = time.monotonic()
    client.rename(stage.pending, keys.pending)
    while int(client.hget(keys.counters, "acked") or 0) < n:
        time.sleep(0.002)
    took = time.monotonic() - began
    children.stop(client)
    return n / took


def singles(url: str, n: int) -> tuple[float, float]:
    """Median µs of a single publish, tracing off and on, interleaved."""
    off_t, on_t = [], []
    with Producer(url, NAMESPACE) as off, Producer(url, NAMESPACE, tracing=True) as on:
        for i in range(n):
            for producer, times in ((off, off_t), (on, on_t)) if i % 2 else ((on, on_t), (off, off_t)):
                t0 = time.perf_counter()
                producer.publish("singles", i)
                times.append((time.perf_counter() - t0) * 1e6)
    return median(off_t), median(on_t)


def many(url: str, n: int, tracing: bool) -> float:
    with Producer(url, NAMESPACE, tracing=tracing) as p:
        t0 = time.perf_counter()
        p.publish_many("many", list(range(n)))
        return n / (time.perf_counter() - t0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2, help="ABBA rounds")
    parser.add_argument("--single", type=int, default=2_000)
    parser.add_argument("--publish-many", type=int, default=10_000)
    args = parser.parse_args()
    with_sdk()  # (the producers of this process: "on" ones only use it)
    with bench_server() as server:
        url = server.url
        client = redis.Redis.from_url(url)
        runs: dict[bool, list[float]] = {False: [], True: []}
        many_runs: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.repeats):
            for tracing in (False, True, True, False) if r % 2 == 0 else (True, False, False, True):
                runs[tracing].append(drain(url, client, args.messages, tracing))
                many_runs[tracing].append(many(url, args.publish_many, tracing))
                client.delete("smq:{many}:pending")
        single_off, single_on = singles(url, args.single)
        print(f"# {machine()}, {transport(server)}, pid {os.getpid()}")
        off, on = median(runs[False]), median(runs[True])
        print(f"consume, 1 consumer, no-op handler (msg/s): off {off:,.0f}  on {on:,.0f}  "
              f"ratio {on / off:.2f}  cost {1e6 / on - 1e6 / off:.1f} us/msg")
        print(f"  runs: off {', '.join(f'{x:,.0f}' for x in runs[False])}; on {', '.join(f'{x:,.0f}' for x in runs[True])}")
        m_off, m_on = median(many_runs[False]), median(many_runs[True])
        print(f"publish_many of {args.publish_many} (msg/s): off {m_off:,.0f}  on {m_on:,.0f}  "
              f"cost {1e6 / m_on - 1e6 / m_off:.2f} us/msg")
        print(f"single publish, median of {args.single} (us): off {single_off:.1f}  on {single_on:.1f}  "
              f"cost {single_on - single_off:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
