"""Tracked messages (result_ttl) and lifecycle events: what tracking and
events cost, how soon a result is read, how soon a cancel stops a message.

    SMQSUP_BENCH_TCP=1 python tests/bench/results.py [--messages 20000] [--repeats 3] [--waits 1000] [--cancels 10]

1. Drain: 2 consumer processes (fork, no-op handler returning None) drain
   ``--messages`` messages staged in one go (published to a staging queue,
   then RENAMEd into the pending list once both consumers block in BLMOVE),
   plain, tracked (result_ttl 60) and with events (events: true, the
   stream capped at 10,000), each of ``--repeats`` rounds in that order or
   its reverse (ABBA); the clock runs from the RENAME until every list is
   empty. Publishing is outside the clock. Reported: median msg/s of each,
   the ratios, and the extra consumer-side time per message (µs).
2. Result: one consumer process whose handler returns ``time.time_ns()``;
   the parent publishes a tracked message, calls ``result()`` and records
   now - that value: the time from the handler's return to ``result()``
   returning (ack, the record, the publication, the waiter's read), over
   ``--waits`` messages one after another. p50, p90, p99, max.
3. Cancel: a real supervisor (``smqsup -c``), a queue of one consumer at a
   time and one of an async consumer at concurrency 10; ``--cancels`` times
   each: a 30 s message is published and seen active, then cancelled; the
   time until ``result()`` raises MessageFailed("cancelled"). The heartbeat
   (1 s) that finds the cancel in the consumers' lists bounds it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402
import redis  # noqa: E402

from smqsup import MessageFailed  # noqa: E402
from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

Q = QueueKeys(common.NAMESPACE, "q")
STAGE = QueueKeys(common.NAMESPACE, "stage")


def _noop(message: Any) -> None:
    return None


def _consume(url: str) -> None:
    common.run_consumer(url, "q", _noop)


def _consume_events(url: str) -> None:
    common.run_consumer(url, "q", _noop, events=True)


def _returner(url: str) -> None:
    import _supervisor_handlers

    common.run_consumer(url, "q", _supervisor_handlers.returned_at)


def _drain_once(url: str, client: "redis.Redis[bytes]", n: int, kind: str) -> float:
    """msg/s of 2 consumers draining ``n`` staged messages of ``kind``
    (plain, tracked or events)."""
    client.flushdb()
    children = common.Children()
    try:
        for _ in range(2):
            children.start(_consume_events if kind == "events" else _consume, url)
        common.wait_ready(client, Q.consumers, 2, children=children)
        if kind == "events":  # the staging queue's producers stamp events on its frames, as q's would
            client.hset(STAGE.options, mapping={"result_ttl": "0", "events_max": "10000"})
        with Producer(url, common.NAMESPACE) as p:
            for start in range(0, n, 1000):
                p.publish_many("stage", range(start, min(n, start + 1000)),
                               result_ttl=60 if kind == "tracked" else None)
        began = time.perf_counter()
        client.rename(STAGE.pending, Q.pending)
        while client.llen(Q.pending) or any(client.llen(Q.processing(c.decode())) for c in client.hkeys(Q.consumers)):
            time.sleep(0.001)
        return n / (time.perf_counter() - began)
    finally:
        children.stop(client)


def drain(url: str, client: "redis.Redis[bytes]", n: int, repeats: int) -> None:
    kinds = ("plain", "tracked", "events")
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(repeats):
        for kind in (kinds if r % 2 == 0 else kinds[::-1]):
            rates[kind].append(_drain_once(url, client, n, kind))
    plain = common.median(rates["plain"])
    print(f"drain, 2 consumers, {n} messages, median of {repeats}: untracked {plain:,.0f} msg/s")
    for kind in kinds[1:]:
        rate = common.median(rates[kind])
        print(f"  {kind}: {rate:,.0f} msg/s ({rate / plain:.2f}x); per message "
              f"+{(1 / rate - 1 / plain) * 2e6:.1f} µs of consumer time")


def result_latency(url: str, client: "redis.Redis[bytes]", waits: int) -> None:
    client.flushdb()
    children = common.Children()
    try:
        children.start(_returner, url)
        common.wait_ready(client, Q.consumers, 1, children=children)
        samples = []
        with Producer(url, common.NAMESPACE) as p:
            for i in range(waits + 50):
                mid = p.publish("q", i, result_ttl=60)
                returned = p.result("q", mid, timeout=10)
                if i >= 50:  # (a warm-up first)
                    samples.append((time.time_ns() - returned) / 1e6)
        samples.sort()
        print(f"handler return -> result() returns, {waits} messages: p50 {common.percentile(samples, 50):.3f} ms, "
              f"p90 {common.percentile(samples, 90):.3f} ms, p99 {common.percentile(samples, 99):.3f} ms, "
              f"max {samples[-1]:.3f} ms")
    finally:
        children.stop(client)


def cancel_latency(url: str, cancels: int) -> None:
    import supervisor as sup_bench

    tmp = Path(tempfile.mkdtemp(prefix="smqbench-cancel-"))
    cfg = tmp / "queues.yaml"
    cfg.write_text(f"redis:\n  url: {url}\nqueues:\n"
                   "  one:\n    handler: _supervisor_handlers:hold\n"
                   "  many:\n    handler: _supervisor_handlers:hold_async\n    concurrency: 10\n")
    notify = sup_bench.Notify(tmp / "notify")
    sup = sup_bench.Supervisor(cfg, tmp / "log", notify.path, tmp)
    try:
        notify.wait_ready(sup, 0, 30)
        with Producer(url, common.NAMESPACE) as p:
            for queue in ("one", "many"):
                samples = []
                for _ in range(cancels):
                    mid = p.publish(queue, 30, result_ttl=60)
                    deadline = time.monotonic() + 30
                    while p.state(queue, mid) != "active":
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"message {mid} of {queue} was not active within 30 s")
                        time.sleep(0.005)
                    began = time.perf_counter()
                    p.cancel(queue, mid)
                    try:
                        p.result(queue, mid, timeout=30)
                    except MessageFailed:
                        samples.append(time.perf_counter() - began)
                samples.sort()
                print(f"cancel of a running message, {queue}: p50 {common.percentile(samples, 50):.2f} s, "
                      f"max {samples[-1]:.2f} s ({len(samples)} of {cancels} raised MessageFailed)")
    finally:
        sup.stop()
        notify.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--waits", type=int, default=1000)
    parser.add_argument("--cancels", type=int, default=10)
    args = parser.parse_args()
    with common.bench_server() as server:
        client: "redis.Redis[bytes]" = redis.Redis.from_url(server.url)
        print(f"{common.machine()}; {common.transport(server)}")
        drain(server.url, client, args.messages, args.repeats)
        result_latency(server.url, client, args.waits)
        cancel_latency(server.url, args.cancels)
        client.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
