"""Beyond one Redis, measured: one logical queue drained by 4 consumer
processes (no-op handler) on one redis-server and on a 3-master Redis Cluster
(3 replicas), with ``partitions`` 1 and 3; and the cost of ``wait_replicas: 1``
per publish.

    python tests/bench/cluster.py [--messages 20000] [--rounds 3]

Every server (the lone one and the cluster's six) is a private redis-server on
loopback TCP in a temp dir, all on this machine: on 2 cores, 4 consumers and
3 masters share the same two CPUs, so a cluster can only show what spreading
costs and saves here, not what separate machines would give. The rounds run
the cases in turn (ABC ABC ...) and each figure is a median; the ratios are
against the lone server measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import NAMESPACE, Children, machine, run_consumer  # type: ignore[import-not-found]

from smqsup.broker import Broker
from smqsup.producer import Producer
from smqsup.redis_server import RedisServer, free_port
from tests.topology import ClusterTopology

QUEUE = "bench"


def noop(message: Any) -> None:
    return None


def consume(url: str, partitions: int) -> None:
    run_consumer(url, QUEUE, noop, partitions=partitions)


def drain_rate(url: str, partitions: int, messages: int, consumers: int = 4) -> float:
    """msg/s of ``consumers`` processes draining ``messages`` preloaded ones."""
    broker = Broker(url, NAMESPACE)
    for part in broker.partition_names(QUEUE, 64):
        for key in (broker.keys(part).pending, broker.keys(part).counters, broker.keys(part).consumers,
                    broker.keys(part).heartbeats, broker.keys(part).partitions):
            broker.delete(key)
    broker.declare_partitions(QUEUE, partitions)
    with Producer(url, NAMESPACE) as p:
        for _ in range(0, messages, 1000):
            p.publish_many(QUEUE, [0] * 1000)  # in turn over the partitions, a batch each
    children = Children()
    began = time.perf_counter()
    for _ in range(consumers):
        children.start(consume, url, partitions)
    try:
        while True:
            acked = sum(broker.counters(part).get("acked", 0) for part in broker.partition_names(QUEUE))
            if acked >= messages:
                return messages / (time.perf_counter() - began)
            if children.failed():
                raise RuntimeError(f"a consumer died: {children.failed()}")
            time.sleep(0.005)
    finally:
        children.stop()
        broker.close()


def publish_latency_us(url: str, wait_replicas: int, count: int = 2000) -> float:
    """Median µs of one publish() (one message, one round trip plus WAIT)."""
    took = []
    with Producer(url, NAMESPACE, wait_replicas=wait_replicas) as p:
        for i in range(count):
            t = time.perf_counter()
            p.publish("latency", i)
            took.append(time.perf_counter() - t)
    return statistics.median(took) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="smqbench-cluster-") as tmp:
        lone = RedisServer(Path(tmp) / "lone", port=free_port(), appendfsync="everysec")
        lone.start()
        cluster = ClusterTopology(Path(tmp) / "cluster")
        cluster.start()
        try:
            cases = {"one server, partitions 1": (lone.url, 1),
                     "cluster, partitions 1": (cluster.url, 1),
                     "cluster, partitions 3": (cluster.url, 3)}
            rates: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):
                for name, (url, parts) in cases.items():
                    rates[name].append(drain_rate(url, parts, args.messages))
            latency = {w: statistics.median(publish_latency_us(cluster.url, w) for _ in range(args.rounds))
                       for w in (0, 1)}
        finally:
            cluster.stop()
            lone.stop()
    base = statistics.median(rates["one server, partitions 1"])
    print(f"# {machine()}; {args.messages} messages, 4 consumer processes, no-op handler, {args.rounds} rounds")
    print("| case | msg/s (median) | vs one server |")
    print("|---|---|---|")
    for name, values in rates.items():
        m = statistics.median(values)
        print(f"| {name} | {m:,.0f} | {m / base:.2f}x |")
    print()
    print("| one publish on the cluster | µs (median of 2000, per round) |")
    print("|---|---|")
    print(f"| wait_replicas 0 | {latency[0]:.0f} |")
    print(f"| wait_replicas 1 | {latency[1]:.0f} ({latency[1] / latency[0]:.2f}x) |")


if __name__ == "__main__":
    main()
