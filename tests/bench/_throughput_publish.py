"""The publishing figures of tests/bench/throughput.py's default mode (not a test module).

``publish_many`` of ``--publish-many`` small messages against a redis-py
pipeline of one LPUSH per message (json.dumps included in both), median of
``--repeats``; the median round trip of ``--single`` single ``publish`` calls
against a single raw LPUSH (the two interleaved, call by call). Each leaves
the keys it used deleted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE


def publish_many_rate(client: "redis.Redis[bytes]", producer: Producer,
                      args: argparse.Namespace) -> tuple[float, float]:
    """(smqsup publish_many msg/s, raw pipelined LPUSH msg/s), medians."""
    n = args.publish_many
    bodies = [{"i": i} for i in range(n)]
    queue, raw_key = "pubmany", QueueKeys(NS, "pubmany-raw").pending
    smq_rates, raw_rates = [], []
    for _ in range(args.repeats):
        client.delete(QueueKeys(NS, queue).pending)
        t0 = time.perf_counter()
        producer.publish_many(queue, bodies)
        smq_rates.append(n / (time.perf_counter() - t0))

        client.delete(raw_key)
        t0 = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for body in bodies:
            pipe.lpush(raw_key, json.dumps({"body": body, "ts": time.time()}))
        pipe.execute()
        raw_rates.append(n / (time.perf_counter() - t0))
    if client.llen(QueueKeys(NS, queue).pending) != n or client.llen(raw_key) != n:
        print("  WARNING: publish_many: list lengths do not match", file=sys.stderr)
    client.delete(QueueKeys(NS, queue).pending, raw_key)
    return common.median(smq_rates), common.median(raw_rates)

def single_publish_rtt(client: "redis.Redis[bytes]", producer: Producer,
                       args: argparse.Namespace) -> tuple[float, float, float]:
    """(smqsup publish median µs, raw LPUSH median µs, Redis commands per publish)."""
    n = args.single
    queue, raw_key = "pub1", QueueKeys(NS, "pub1-raw").pending
    for i in range(50):  # warm-up; the first publish also registers the queue
        producer.publish(queue, {"i": i})
        client.lpush(raw_key, json.dumps({"body": {"i": i}, "ts": time.time()}))
    smq, raw = [], []
    for i in range(n):  # interleaved, so drift hits both alike
        t0 = time.perf_counter_ns()
        producer.publish(queue, {"i": i})
        t1 = time.perf_counter_ns()
        client.lpush(raw_key, json.dumps({"body": {"i": i}, "ts": time.time()}))
        t2 = time.perf_counter_ns()
        smq.append(t1 - t0)
        raw.append(t2 - t1)
    before = common.command_calls(client)
    for i in range(100):
        producer.publish(queue, {"i": i})
    after = common.command_calls(client)
    delta = common.calls_delta(before, after)
    delta.pop("info", None)
    per_publish = sum(delta.values()) / 100
    client.delete(QueueKeys(NS, queue).pending, raw_key)
    return common.median(smq) / 1000.0, common.median(raw) / 1000.0, per_publish


def print_publishing(client: "redis.Redis[bytes]", producer: Producer, args: argparse.Namespace) -> None:
    """Measure both figures and print their table."""
    pm_s, pm_r = publish_many_rate(client, producer, args)
    rtt_s, rtt_r, per_pub = single_publish_rtt(client, producer, args)
    print("\nPublishing (ratio = smqsup speed / raw speed)")
    print(f"{'':38} | {'smqsup':>10} | {'raw redis-py':>12} | ratio | target")
    print(f"{f'publish_many of {args.publish_many} (msg/s)':38} | {pm_s:10,.0f} | {pm_r:12,.0f} | "
          f"{pm_s / pm_r:5.2f} | >= 100,000 msg/s {'OK' if pm_s >= 100_000 else 'MISSED'}")
    print(f"{f'single publish, median of {args.single} (us)':38} | {rtt_s:10.1f} | {rtt_r:12.1f} | "
          f"{rtt_r / rtt_s:5.2f} | one round trip: {per_pub:.2f} Redis commands/publish")
