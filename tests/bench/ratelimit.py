"""A global rate limit: the rate smqsup achieves against ``rate_limit``, and
Redis round trips per message with a limit against without (issue 12).

    python tests/bench/ratelimit.py [--limit 200] [--seconds 10] [--consumers 2] [--concurrency 1]

``--consumers`` consumer processes (a no-op handler; ``--concurrency`` each)
drain a backlog far larger than the limit allows in ``--seconds``, under
``rate_limit: LIMIT/s``. Achieved rate: messages acked in the window from 1 s
after the start to the end (the first second holds the burst), per second;
target at least 95 % of the limit. Round trips: the consumers' EVALSHA and
BLMOVE calls per message (INFO commandstats), in that run and in a run of the
same backlog without a limit (drained at full speed). With concurrency 1 each
EVALSHA is one round trip; a concurrent consumer pipelines several per round
trip, so its figure is an upper bound.

A private redis-server (unix socket, appendfsync everysec) in a temp dir is
started and stopped by this script.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _common as common  # noqa: E402
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

QUEUE = "rl"


def noop(message: Any) -> None:
    pass


def worker(url: str, concurrency: int, per_s: float) -> None:
    common.run_consumer(url, QUEUE, noop, None, concurrency, rate_limit_per_s=per_s)


def run(url: str, args: argparse.Namespace, per_s: float, messages: int) -> tuple[float, dict[str, int], int]:
    """One run: (achieved msg/s in the steady window, command calls, messages acked)."""
    client = redis.Redis.from_url(url)
    keys = QueueKeys(common.NAMESPACE, QUEUE)
    client.delete(keys.pending, keys.counters, keys.rate)
    children = common.Children()
    for _ in range(args.consumers):
        children.start(worker, url, args.concurrency, per_s)
    common.wait_ready(client, keys.consumers, args.consumers, children=children)
    with Producer(url, common.NAMESPACE) as p:
        for i in range(0, messages, 1000):
            p.publish_many(QUEUE, [{"i": j} for j in range(i, min(i + 1000, messages))])
    before = common.command_calls(client)
    began = time.monotonic()

    def acked() -> int:
        return int(client.hget(keys.counters, "acked") or 0)
    mark: Optional[tuple[float, int]] = None
    while True:
        now = time.monotonic()
        if mark is None and now - began >= 1.0:
            mark = (now, acked())
        if acked() >= messages or (per_s and now - began >= args.seconds):
            break
        time.sleep(0.01)
    end, done = time.monotonic(), acked()
    calls = common.calls_delta(before, common.command_calls(client))
    children.stop(client)
    start_t, start_n = mark if mark is not None else (began, 0)
    return (done - start_n) / max(end - start_t, 1e-9), calls, done


def per_message(calls: dict[str, int], n: int) -> str:
    """Round trips a message: the consumers' script calls and blocking fetches (INFO commandstats also
    counts the commands a script runs, and the EXISTS pipelined with each BLMOVE: left out)."""
    trips = {k: v / n for k, v in sorted(calls.items()) if k in ("evalsha", "eval", "blmove") and v}
    return f"{sum(trips.values()):.3f} (" + ", ".join(f"{k} {v:.3f}" for k, v in trips.items()) + ")"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=float, default=200.0, help="rate_limit, messages per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the limited run")
    ap.add_argument("--consumers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args()
    messages = int(args.limit * (args.seconds + 5))
    print(f"smqsup rate limit benchmark: {common.machine()}")
    print(f"rate_limit {args.limit:g}/s, {args.consumers} consumers x concurrency {args.concurrency}, "
          f"no-op handler, backlog {messages:,}, {args.seconds:g} s\n")
    try:
        with common.bench_server() as server:
            rate, calls, done = run(server.url, args, args.limit, messages)
            free_rate, free_calls, free_done = run(server.url, args, 0.0, messages)
    except (KeyboardInterrupt, common.Terminated):
        print("\nstopped: consumers and redis-server stopped", file=sys.stderr)
        return 130
    ok = rate >= 0.95 * args.limit
    print(f"achieved {rate:,.1f} msg/s against the limit {args.limit:g}/s: {rate / args.limit:.1%} "
          f"(target >= 95 %: {'OK' if ok else 'MISSED'})")
    print(f"round trips per message with the limit:    {per_message(calls, done)}")
    print(f"round trips per message without a limit:   {per_message(free_calls, free_done)} "
          f"(drained at {free_rate:,.0f} msg/s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
