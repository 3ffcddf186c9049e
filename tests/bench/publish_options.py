"""What the publish options cost (issue 10): a publish with a dedup key, a
delay, a priority or a ttl against a plain publish of the same run.

    python tests/bench/publish_options.py [--single 2000] [--many 10000] [--repeats 5]

1. single ``Producer.publish`` round trips, median of ``--single`` each, the
   kinds interleaved call by call (plain, dedup_key fresh, dedup hit, ...), so
   drift of the machine hits all alike:
   - plain: no option (publish.lua, the fast path);
   - dedup fresh: a new ``dedup_key`` every call (SET NX PX, then queued);
   - dedup hit: always the same key, held (SET NX fails, GET: nothing queued);
   - delay: ``delay=60`` (ZADD to the scheduled set);
   - priority: ``priority=5`` on a queue already holding messages (ZADD to
     the priority set and INCR of its sequence);
   - ttl: ``ttl=600`` (a longer frame head, LPUSH).
   Each kind publishes to a queue of its own, never consumed. Also: Redis
   commands per publish (INFO commandstats over 100 more calls; commands a
   Lua script runs count too).
2. ``publish_many`` of ``--many`` messages, median of ``--repeats`` (kinds
   rotated, reversed every other repeat): plain; a list of dedup keys, all
   fresh; the same list again (every key held: nothing queued); ``priority=5``;
   ``delay=60``. The queues are emptied between repeats.

Ratios are time / the plain publish's time of the same run (above 1: slower);
the single publishes also print the time added to a plain publish (+us), the
steadier figure: on a 2-core VM one round trip takes ~50 us or ~110 us from run
to run (where the scheduler puts this process and redis-server), the added
time much less so.
A private redis-server (unix socket, appendfsync everysec) in a temp dir is
started and stopped by this script; Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
#: publish() keywords of each single-publish kind; a callable is called with the call's number.
SINGLE: dict[str, dict[str, Any]] = {
    "plain": {},
    "dedup fresh": {"dedup_key": lambda i: f"fresh-{i}"},
    "dedup hit": {"dedup_key": "held"},
    "delay=60": {"delay": 60},
    "priority=5": {"priority": 5},
    "ttl=600": {"ttl": 600},
}
MANY = ("plain", "dedup keys fresh", "dedup keys held", "priority=5", "delay=60")


def queue_of(kind: str) -> str:
    return "q" + "".join(c for c in kind if c.isalnum())


def single_call(producer: Producer, kind: str) -> Callable[[int], None]:
    """A function publishing the i-th message of ``kind``."""
    queue, spec = queue_of(kind), SINGLE[kind]

    def call(i: int) -> None:
        kw = {k: (v(i) if callable(v) else v) for k, v in spec.items()}
        producer.publish(queue, {"i": i}, **kw)
    return call


def single(producer: Producer, client: "redis.Redis[bytes]", n: int) -> dict[str, tuple[float, float]]:
    """kind -> (median µs of one publish, Redis commands per publish)."""
    calls = {kind: single_call(producer, kind) for kind in SINGLE}
    for i in range(50):  # warm-up: registers each queue, loads the scripts, takes the held key
        for call in calls.values():
            call(-1 - i)
    times: dict[str, list[int]] = {kind: [] for kind in SINGLE}
    for i in range(n):
        for kind, call in calls.items():
            t0 = time.perf_counter_ns()
            call(i)
            times[kind].append(time.perf_counter_ns() - t0)
    out = {}
    for kind, call in calls.items():
        before = common.command_calls(client)
        for i in range(100):
            call(n + i)
        delta = common.calls_delta(before, common.command_calls(client))
        delta.pop("info", None)
        out[kind] = (common.median(times[kind]) / 1000.0, sum(delta.values()) / 100)
    return out


def many_once(producer: Producer, client: "redis.Redis[bytes]", kind: str, rep: int, n: int) -> float:
    """Seconds one publish_many of ``n`` messages of ``kind`` takes."""
    queue = queue_of("many " + kind)
    bodies = [{"i": i} for i in range(n)]
    kw: dict[str, Any] = {"plain": {}, "priority=5": {"priority": 5}, "delay=60": {"delay": 60}}.get(kind, {})
    if kind.startswith("dedup"):
        kw = {"dedup_key": [f"r{rep}-{i}" for i in range(n)]}
        if kind == "dedup keys held":
            producer.publish_many(queue + "held", bodies, **kw)  # takes every key first (not timed)
            queue += "held"
    t0 = time.perf_counter()
    producer.publish_many(queue, bodies, **kw)
    elapsed = time.perf_counter() - t0
    keys = QueueKeys(NS, queue)
    queued = client.llen(keys.pending) + client.zcard(keys.priority) + client.zcard(keys.scheduled)
    if queued != n:  # "held": the untimed first publish queued them all, the timed one nothing
        print(f"  WARNING: {kind}: {queued} queued, expected {n}", file=sys.stderr)
    client.delete(keys.pending, keys.priority, keys.scheduled)
    return elapsed


def many(producer: Producer, client: "redis.Redis[bytes]", n: int, repeats: int) -> dict[str, float]:
    """kind -> median seconds of one publish_many of ``n``."""
    many_once(producer, client, "plain", -1, 1000)  # warm-up
    times: dict[str, list[float]] = {kind: [] for kind in MANY}
    for rep in range(repeats):
        for kind in (MANY if rep % 2 == 0 else MANY[::-1]):
            times[kind].append(many_once(producer, client, kind, rep, n))
    return {kind: common.median(t) for kind, t in times.items()}


def report(one: dict[str, tuple[float, float]], bulk: dict[str, float], args: argparse.Namespace) -> None:
    plain_us = one["plain"][0]
    print(f"Single publish, median of {args.single} each (interleaved); ratio = time / plain's")
    print(f"{'':16} | {'us':>7} | {'+us':>6} | {'ratio':>5} | Redis commands/publish")
    for kind, (us, cmds) in one.items():
        print(f"{kind:16} | {us:7.1f} | {us - plain_us:+6.1f} | {us / plain_us:5.2f} | {cmds:.2f}")
    plain_s = bulk["plain"]
    print(f"\npublish_many of {args.many}, median of {args.repeats}; ratio = time / plain's")
    print(f"{'':16} | {'ms':>7} | {'msg/s':>9} | {'ratio':>5}")
    for kind, sec in bulk.items():
        print(f"{kind:16} | {sec * 1000:7.1f} | {args.many / sec:9,.0f} | {sec / plain_s:5.2f}")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--single", type=int, default=2_000, help="single publishes timed per kind")
    parser.add_argument("--many", type=int, default=10_000, help="messages per publish_many")
    parser.add_argument("--repeats", type=int, default=5, help="publish_many runs per kind (median)")
    args = parser.parse_args(argv)
    print(f"smqsup publish-options benchmark: {common.machine()}")
    with common.bench_server() as server:
        client: "redis.Redis[bytes]" = redis.Redis.from_url(server.url)
        producer = Producer(server.url, NS)
        try:
            with common.interruptible("redis-server"):
                print(f"redis-server {client.info('server')['redis_version']}, {common.transport(server)}, appendfsync everysec\n",
                      flush=True)
                one = single(producer, client, args.single)
                bulk = many(producer, client, args.many, args.repeats)
                report(one, bulk, args)
        finally:
            producer.close()
            client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
