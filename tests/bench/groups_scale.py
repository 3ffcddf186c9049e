"""Message groups at scale (issue: fair queues): 1,000,000 distinct groups of
one message each in one queue, against a queue of the same messages without
groups, on a private redis-server.

    python tests/bench/groups_scale.py [--groups 1000000] [--takes 20000]

Prints, for each queue: the memory Redis uses for it (INFO used_memory,
before and after the publish), how long the status snapshot of it takes
(smqsup status, the web UI: its reads are bounded whatever the number of
groups), and the server time per message of taking and acking ``--takes``
messages one at a time (take.lua, then ack.lua: INFO commandstats), so
that "fetching stays O(1) per message" is a figure, and one collector
repair (group_repair.lua: a slice of the groups).

A private redis-server (a unix socket; TCP loopback with SMQSUP_BENCH_TCP=1)
is started here and stopped on exit.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.collector import stats  # noqa: E402
from smqsup.ids import new_id  # noqa: E402
from smqsup.message import EnvelopeWriter  # noqa: E402
from smqsup.store import scripts  # noqa: E402
from smqsup.store.broker import Broker  # noqa: E402
from smqsup.store.core.consumer_info import ConsumerInfo  # noqa: E402

#: Script calls one pipelined round trip of the publish sends.
_PIPELINE = 5000


def publish(broker: Broker, client: "redis.Redis[bytes]", queue: str, groups: int, grouped: bool) -> float:
    """``groups`` messages to ``queue``, each in a group of its own (or none); the seconds it took."""
    keys = broker.keys(queue)
    writer = EnvelopeWriter(queue, None, 1 << 20)
    t0 = time.perf_counter()
    for start in range(0, groups, _PIPELINE):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(groups, start + _PIPELINE)):
            mid = new_id()
            options = scripts.Options(group=f"tenant-{i}".encode() if grouped else b"")
            call = scripts.publish_options(keys, [(mid, writer.payload(mid, {"n": i}), None)], options)
            if i == 0:
                call.run(client)  # (loads the script: the pipeline sends its SHA)
                continue
            pipe.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
        pipe.execute()
    return time.perf_counter() - t0


def server_us(client: "redis.Redis[bytes]", command: str) -> tuple[int, float]:
    """(calls, usec) of one script in INFO commandstats (by its SHA's command name: evalsha)."""
    info = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(info.get("calls", 0)), float(info.get("usec", 0.0))


def take_and_ack(broker: Broker, client: "redis.Redis[bytes]", queue: str, n: int) -> float:
    """Server µs per message of taking one frame and acking it, ``n`` times."""
    broker.registry.register_consumer(queue, "bench", ConsumerInfo(pid=1))
    client.config_resetstat()
    for _ in range(n):
        took = broker.messages.take(queue, "bench", 1)
        for frame in took.frames:
            broker.messages.ack(queue, "bench", frame, False)
    calls, usec = server_us(client, "evalsha")
    return usec / max(1, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=1_000_000)
    ap.add_argument("--takes", type=int, default=20_000)
    args = ap.parse_args()
    print(common.machine())
    with common.bench_server() as server:
        client = redis.Redis.from_url(server.url)
        broker = Broker(server.url, common.NAMESPACE)
        print(f"transport: {common.transport(server)}; {args.groups:,} messages per queue")
        for queue, grouped in (("plain", False), ("grouped", True)):
            before = int(client.info("memory")["used_memory"])
            took_s = publish(broker, client, queue, args.groups, grouped)
            used = int(client.info("memory")["used_memory"]) - before
            t0 = time.perf_counter()
            snap = stats.snapshot(broker, [queue])
            status_ms = (time.perf_counter() - t0) * 1000
            q = snap["queues"][queue]
            per_us = take_and_ack(broker, client, queue, args.takes)
            print(f"{queue:8s} publish {took_s:6.1f} s, Redis memory {used / 1e6:8.1f} MB "
                  f"({used / args.groups:5.0f} B/message), status snapshot {status_ms:6.1f} ms "
                  f"(pending {q['sizes']['pending']:,}, groups {q['groups']['waiting']:,}), "
                  f"take + ack {per_us:5.1f} µs of Redis per message")
        lock = ("smq:{grouped}:gc:lock", "bench")
        client.set(lock[0], lock[1])
        client.config_resetstat()
        t0 = time.perf_counter()
        broker.groups.repair("grouped", lock, 0)
        print(f"one collector repair of the grouped queue: {(time.perf_counter() - t0) * 1000:.1f} ms "
              f"(a slice of {200} groups)")
        broker.close()


if __name__ == "__main__":
    main()
