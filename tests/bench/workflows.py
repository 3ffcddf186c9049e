"""Dependencies and batches: how soon a child starts after its last parent,
and what a batch costs against the same messages without one.

    SMQSUP_BENCH_TCP=1 python tests/bench/workflows.py [--pairs 500] [--messages 10000] [--repeats 3]

1. Release: one consumer process on queue "p" and one on queue "c", whose
   handlers return ``time.time_ns()`` (the parent's after 5 ms, so that its
   child is registered first); ``--pairs`` times, one after another, a
   parent is published on "p" (tracked) and a child on "c" that depends on
   it; the child's result minus the parent's is the time from the parent's
   handler returning (its ack, the outbox drained by its consumer, the
   child's unblock.lua, the child's consumer woken from BLMOVE) to the
   child's handler running. p50, p90, p99, max.
2. Batch: 2 consumer processes (no-op handler) drain ``--messages``
   messages staged in one go (as results.py stages them: published to a
   staging queue, RENAMEd into the pending list once both consumers block),
   plain, or as the members of one closed batch whose on_complete goes to a
   queue nobody consumes; the clock runs from the RENAME until every list is
   empty and, for the batch, its callback is published. ``--repeats``
   rounds, ABBA. Reported: median msg/s of each, the ratio, and the extra
   time per message (µs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as common  # noqa: E402
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

Q = QueueKeys(common.NAMESPACE, "q")
STAGE = QueueKeys(common.NAMESPACE, "stage")
CALLBACK = QueueKeys(common.NAMESPACE, "cb")


def _noop(message: Any) -> None:
    return None


def _consume(url: str) -> None:
    common.run_consumer(url, "q", _noop)


def _returned_at(message: Any) -> int:
    """When the handler returned; a parent first waits 5 ms, so that its child is registered before it ends
    (the path measured: the parent's ack tells the child, not the child's publish finding it ended)."""
    if message.queue == "p":
        time.sleep(0.005)
    return time.time_ns()


def _returner(queue: str) -> Any:
    def run(url: str) -> None:
        common.run_consumer(url, queue, _returned_at)
    return run


def release_latency(url: str, client: "redis.Redis[bytes]", pairs: int) -> None:
    client.flushdb()
    children = common.Children()
    try:
        children.start(_returner("p"), url)
        children.start(_returner("c"), url)
        common.wait_ready(client, QueueKeys(common.NAMESPACE, "p").consumers, 1, children=children)
        common.wait_ready(client, QueueKeys(common.NAMESPACE, "c").consumers, 1, children=children)
        samples = []
        with Producer(url, common.NAMESPACE) as p:
            for i in range(pairs + 50):
                parent = p.publish("p", i, result_ttl=60)
                child = p.publish("c", i, result_ttl=60, depends_on=[("p", parent)])
                started, returned = p.result("c", child, timeout=10), p.result("p", parent, timeout=10)
                if i >= 50:  # (a warm-up first)
                    samples.append((started - returned) / 1e6)
        samples.sort()
        print(f"last parent's handler returns -> child's handler runs, {pairs} pairs: "
              f"p50 {common.percentile(samples, 50):.3f} ms, p90 {common.percentile(samples, 90):.3f} ms, "
              f"p99 {common.percentile(samples, 99):.3f} ms, max {samples[-1]:.3f} ms")
    finally:
        children.stop(client)


def _drain_once(url: str, client: "redis.Redis[bytes]", n: int, batched: bool) -> float:
    """msg/s of 2 consumers draining ``n`` staged messages, plain or one batch's."""
    client.flushdb()
    children = common.Children()
    try:
        for _ in range(2):
            children.start(_consume, url)
        common.wait_ready(client, Q.consumers, 2, children=children)
        with Producer(url, common.NAMESPACE) as p:
            if batched:
                with p.batch(on_complete=("cb", "all done")) as batch:
                    for start in range(0, n, 1000):
                        batch.publish_many("stage", range(start, min(n, start + 1000)))
            else:
                for start in range(0, n, 1000):
                    p.publish_many("stage", range(start, min(n, start + 1000)))
        began = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        if batched:  # the members' links move with them (same slot: one server here)
            pipe.rename(STAGE.deps, Q.deps)
        pipe.rename(STAGE.pending, Q.pending)
        pipe.execute()
        while client.llen(Q.pending) or any(client.llen(Q.processing(c.decode())) for c in client.hkeys(Q.consumers)) \
                or (batched and not client.llen(CALLBACK.pending)):
            time.sleep(0.001)
        return n / (time.perf_counter() - began)
    finally:
        children.stop(client)


def batch_cost(url: str, client: "redis.Redis[bytes]", n: int, repeats: int) -> None:
    rates: dict[bool, list[float]] = {False: [], True: []}
    for r in range(repeats):
        for batched in ((False, True) if r % 2 == 0 else (True, False)):
            rates[batched].append(_drain_once(url, client, n, batched))
    plain, batch = common.median(rates[False]), common.median(rates[True])
    print(f"drain, 2 consumers, {n} messages, median of {repeats}: plain {plain:,.0f} msg/s, one batch "
          f"{batch:,.0f} msg/s ({batch / plain:.2f}x); per message +{(1 / batch - 1 / plain) * 2e6:.1f} µs of "
          f"consumer time")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with common.bench_server() as server:
        print(common.machine(), "|", common.transport(server))
        client = redis.Redis.from_url(server.url)
        release_latency(server.url, client, args.pairs)
        batch_cost(server.url, client, args.messages, args.repeats)


if __name__ == "__main__":
    main()
