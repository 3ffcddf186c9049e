"""Beyond one Redis, measured: one logical queue drained by 4 consumer
processes (no-op handler) on one redis-server and on a 3-master Redis Cluster
(3 replicas), with ``partitions`` 1 and 3, and on the cluster with
``wait_replicas: 1`` (every ack waits for a replica too); and the cost of
``wait_replicas: 1`` per publish.

    python tests/bench/cluster.py [--messages 40000] [--rounds 3]

Every server (the lone one and the cluster's six) is a private redis-server on
loopback TCP in a temp dir, all on this machine: on 2 cores, 4 consumers and
3 masters share the same two CPUs, so a cluster can only show what spreading
costs and saves here, not what separate machines would give. The rounds run
the cases in turn (ABC ABC ...) and each figure is a median; the ratios are
against the lone server measured in the same run. A rate is timed from the
first message taken to the last (the waiting lists read live), so the
consumers' start is not in it.

A cluster places a partition on the master that owns its hash slot: the
queue's name is chosen here so that its 3 partitions land on 3 different
masters (printed), the layout a user gets by choosing the name, or a few
times as many partitions as masters.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import NAMESPACE, Children, machine, run_consumer  # type: ignore[import-not-found]

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys, partition_names
from smqsup.launch.discovery import free_port
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from tests.support.topology import ClusterTopology


def noop(message: Any) -> None:
    return None


def consume(url: str, queue: str, partitions: int, wait_replicas: int) -> None:
    run_consumer(url, queue, noop, partitions=partitions, wait_replicas=wait_replicas)


def spread_name(cluster_url: str, partitions: int) -> tuple[str, list[str]]:
    """A queue name whose ``partitions`` hash tags are served by as many
    different masters, and those masters (host:port), partition by partition."""
    broker = Broker(cluster_url, NAMESPACE)
    try:
        for n in range(1000):
            name = f"bench{n}"
            nodes = [broker.client.get_node_from_key(QueueKeys(NAMESPACE, part).pending).name
                     for part in partition_names(name, partitions)]
            if len(set(nodes)) == partitions:
                return name, nodes
    finally:
        broker.close()
    raise RuntimeError("no name of 1000 spreads its partitions over distinct masters")


def drain_rate(url: str, queue: str, partitions: int, messages: int, wait_replicas: int = 0,
               consumers: int = 4) -> float:
    """msg/s of ``consumers`` processes draining ``messages`` preloaded ones,
    from the first taken to the last."""
    broker = Broker(url, NAMESPACE)
    for part in broker.queues.partition_names(queue, 64):
        for key in (broker.keys(part).pending, broker.keys(part).counters, broker.keys(part).consumers,
                    broker.keys(part).heartbeats, broker.keys(part).partitions):
            broker.contents.delete(key)
    broker.queues.declare_partitions(queue, partitions)
    with Producer(url, NAMESPACE) as p:
        for _ in range(0, messages, 1000):
            p.publish_many(queue, [0] * 1000)  # in turn over the partitions, a batch each
    children = Children()
    for _ in range(consumers):
        children.start(consume, url, queue, partitions, wait_replicas)
    pending = [broker.keys(part).pending for part in broker.queues.partition_names(queue)]
    began = 0.0
    try:
        while True:
            # Timed from the first message taken to the last: waiting lists
            # are read live (the counters are flushed only once a second).
            left = sum(broker.client.llen(key) for key in pending)
            if left < messages and not began:
                began, first = time.perf_counter(), messages - left
            if left == 0:
                return (messages - first) / (time.perf_counter() - began)
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
    ap.add_argument("--messages", type=int, default=40000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="smqbench-cluster-") as tmp:
        lone = RedisServer(Path(tmp) / "lone", port=free_port(), appendfsync="everysec")
        lone.start()
        cluster = ClusterTopology(Path(tmp) / "cluster")
        cluster.start()
        try:
            queue, masters = spread_name(cluster.url, 3)
            cases = {"one server, partitions 1": (lone.url, 1, 0),
                     "one server, partitions 3": (lone.url, 3, 0),
                     "cluster, partitions 1": (cluster.url, 1, 0),
                     "cluster, partitions 3": (cluster.url, 3, 0),
                     "cluster, partitions 3, wait_replicas 1": (cluster.url, 3, 1)}
            rates: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):
                for name, (url, parts, wait) in cases.items():
                    rates[name].append(drain_rate(url, queue, parts, args.messages, wait))
            latency = {w: statistics.median(publish_latency_us(cluster.url, w) for _ in range(args.rounds))
                       for w in (0, 1)}
        finally:
            cluster.stop()
            lone.stop()
    base = statistics.median(rates["one server, partitions 1"])
    print(f"# {machine()}; {args.messages} messages, 4 consumer processes, no-op handler, {args.rounds} rounds")
    print(f"# queue {queue!r}: on the cluster its partitions 0, 1, 2 live on masters {', '.join(masters)}")
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
