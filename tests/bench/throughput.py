"""Throughput of smqsup against a minimal hand-written redis-py loop (DESIGN section 7).

    python tests/bench/throughput.py [--messages 20000] [--repeats 3] [--profile auto] [--priority]

Consumers (no-op handler), 1 and 2 consumer processes (fork), each case run
``--repeats`` times alternating smqsup / raw (ABBA order), median reported:

- smqsup: ``Consumer(Broker(url), QueueConfig(...), noop).run()`` per process.
- raw:    a plain ``redis.Redis.from_url`` client per process doing
          ``BLMOVE pending proc RIGHT LEFT 1`` then ``LREM proc 1 frame``.

Method (process startup and publishing are excluded from the clock): the
consumers start on an empty queue; once all are registered AND blocked in
BLMOVE (INFO blocked_clients), the messages, already published with
``Producer.publish_many`` to a staging queue, are moved into the pending list
with one RENAME (which wakes the blocked consumers). The clock runs from the
RENAME until the pending list and every processing list are empty (LLEN
polled every ``--poll-ms``).

Publishing: ``publish_many`` of ``--publish-many`` small messages against a
redis-py pipeline of one LPUSH per message (json.dumps included in both), and
the median round-trip time of ``--single`` single ``publish`` calls against a
single raw LPUSH (the two interleaved, call by call).

``--priority``: a third kind of run, "prio", the smqsup consumer on messages
spread over priorities 0-9 (``--messages`` / 10 per level, staged with one
``publish_many(priority=p)`` per level, 0 first: priority 0 lands in the
pending list, 1-9 in the priority set), released by one MULTI of RENAMEs
(priority set, its sequence counter, pending list; the clock runs from it
until the list, the set and every processing list are empty). Runs rotate
smqsup / prio / raw (reversed every other repeat); the table adds prio's msg/s
and its ratios against raw and against smqsup with every message at
priority 0 (the default mode, unchanged). The raw loop knows no priorities: it
is the same plain-list baseline. The consumers blocked in BLMOVE when the
RENAME lands take their first message straight from the list (one per
consumer); every later take goes through the priority-aware scripts. The
publishing figures are left out in this mode (tests/bench/publish_options.py
measures publishing with options).

A private redis-server (unix socket, appendfsync everysec) in a temp dir is
started and stopped by this script; Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.keys import QueueKeys  # noqa: E402
from smqsup.producer import Producer  # noqa: E402

NS = common.NAMESPACE
#: Priorities the messages of a "prio" run are spread over (0-9).
LEVELS = 10


def noop(message: Any) -> None:
    """The benchmark handler: does nothing."""


# --- consumer processes (run in forked children) --------------------------------------


def smq_worker(url: str, queue: str, out: Any, profile_path: Optional[str]) -> None:
    consumer = common.run_consumer(url, queue, noop, profile_path)
    out.put(("smqsup", os.getpid(), consumer.stats.received, consumer.stats.acked))


def raw_worker(url: str, queue: str, out: Any, profile_path: Optional[str]) -> None:
    state = {"stop": False}
    common.child_signals(lambda: state.__setitem__("stop", True))
    keys = QueueKeys(NS, queue)
    cid = f"raw-{os.getpid()}"
    pending, proc = keys.pending, keys.processing(cid)
    r = redis.Redis.from_url(url)
    r.hset(keys.consumers, cid, "{}")  # so the parent finds our list and counts us ready
    n = 0
    while not state["stop"]:
        frame = r.blmove(pending, proc, 1, "RIGHT", "LEFT")
        if frame is None:
            continue
        r.lrem(proc, 1, frame)
        n += 1
    r.hdel(keys.consumers, cid)
    r.close()
    out.put(("raw", os.getpid(), n, n))


WORKERS: dict[str, Callable[..., None]] = {"smqsup": smq_worker, "prio": smq_worker, "raw": raw_worker}


# --- one timed consumer run ------------------------------------------------------------


class Bench:
    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url
        self.args = args
        self.client = redis.Redis.from_url(url)
        self.producer = Producer(url, NS)
        self.bodies = [{"i": i} for i in range(args.messages)]
        self.children = common.Children()
        self.run_no = 0
        self.cmds: dict[tuple[str, int], dict[str, float]] = {}

    def consume_run(self, kind: str, n_consumers: int, profile_path: Optional[str] = None) -> float:
        """One timed run; returns messages per second."""
        self.run_no += 1
        queue = f"tp{self.run_no}"
        keys = QueueKeys(NS, queue)
        stage = QueueKeys(NS, f"tp{self.run_no}stage")
        n = self.args.messages
        out = common.CTX.SimpleQueue()
        try:
            for _ in range(n_consumers):
                self.children.start(WORKERS[kind], self.url, queue, out, profile_path)
            common.wait_ready(self.client, keys.consumers, n_consumers, children=self.children)
            moves = self.stage(kind, stage, keys)
            lists = [keys.processing(cid.decode()) for cid in self.client.hkeys(keys.consumers)]
            poll_keys = [keys.pending, *lists]

            def remaining() -> int:
                pipe = self.client.pipeline(transaction=False)  # execute() empties a pipeline
                for name in poll_keys:
                    pipe.llen(name)
                if kind == "prio":
                    pipe.zcard(keys.priority)
                return sum(pipe.execute())

            sleep_s = self.args.poll_ms / 1000.0
            before = common.command_calls(self.client)
            t0 = time.perf_counter()
            self.release(moves)  # wakes the blocked consumers
            while True:
                time.sleep(sleep_s)
                if not remaining():
                    break
            elapsed = time.perf_counter() - t0
            after = common.command_calls(self.client)
        finally:
            self.children.stop(self.client)
        results = []
        while not out.empty():
            results.append(out.get())
        done = sum(r[3] for r in results)
        if done != n:
            print(f"  WARNING: {kind} x{n_consumers}: consumers report {done} acked of {n}", file=sys.stderr)
        # commands sent by consumers per message (the parent's polling excluded)
        delta = common.calls_delta(before, after)
        for ours in ("llen", "rename", "info", "zcard", "multi", "exec"):
            delta.pop(ours, None)
        self.cmds[(kind, n_consumers)] = {k: v / n for k, v in delta.items()}
        return n / elapsed

    def stage(self, kind: str, stage: QueueKeys, keys: QueueKeys) -> list[tuple[str, str]]:
        """Publish the run's messages to the staging queue: all at priority 0,
        or (kind "prio") one publish_many per priority 0-9; the RENAMEs
        (staged key, consumed key) that release them, the pending list last."""
        n = self.args.messages
        if kind != "prio":
            self.producer.publish_many(stage.queue, self.bodies)
            if self.client.llen(stage.pending) != n:
                raise RuntimeError("staging list does not hold every message")
            return [(stage.pending, keys.pending)]
        per = -(-n // LEVELS)
        for p in range(LEVELS):
            if self.bodies[p * per:(p + 1) * per]:
                self.producer.publish_many(stage.queue, self.bodies[p * per:(p + 1) * per], priority=p)
        if self.client.llen(stage.pending) + self.client.zcard(stage.priority) != n:
            raise RuntimeError("staging list and priority set do not hold every message")
        moves = [(stage.priority, keys.priority), (stage.priority_seq, keys.priority_seq)]
        return [(src, dst) for src, dst in moves if self.client.exists(src)] + [(stage.pending, keys.pending)]

    def release(self, moves: list[tuple[str, str]]) -> None:
        """Move the staged messages into the consumed queue at once (RENAME
        of the pending list wakes the consumers blocked in BLMOVE on it)."""
        if len(moves) == 1:
            self.client.rename(*moves[0])
            return
        pipe = self.client.pipeline(transaction=True)  # one MULTI: no consumer sees half of it
        for src, dst in moves:
            pipe.rename(src, dst)
        pipe.execute()

    # --- publishing ---------------------------------------------------------------

    def publish_many_rate(self) -> tuple[float, float]:
        """(smqsup publish_many msg/s, raw pipelined LPUSH msg/s), medians."""
        n = self.args.publish_many
        bodies = [{"i": i} for i in range(n)]
        queue, raw_key = "pubmany", QueueKeys(NS, "pubmany-raw").pending
        smq_rates, raw_rates = [], []
        for _ in range(self.args.repeats):
            self.client.delete(QueueKeys(NS, queue).pending)
            t0 = time.perf_counter()
            self.producer.publish_many(queue, bodies)
            smq_rates.append(n / (time.perf_counter() - t0))

            self.client.delete(raw_key)
            t0 = time.perf_counter()
            pipe = self.client.pipeline(transaction=False)
            for body in bodies:
                pipe.lpush(raw_key, json.dumps({"body": body, "ts": time.time()}))
            pipe.execute()
            raw_rates.append(n / (time.perf_counter() - t0))
        if self.client.llen(QueueKeys(NS, queue).pending) != n or self.client.llen(raw_key) != n:
            print("  WARNING: publish_many: list lengths do not match", file=sys.stderr)
        self.client.delete(QueueKeys(NS, queue).pending, raw_key)
        return common.median(smq_rates), common.median(raw_rates)

    def single_publish_rtt(self) -> tuple[float, float, float]:
        """(smqsup publish median µs, raw LPUSH median µs, Redis commands per publish)."""
        n = self.args.single
        queue, raw_key = "pub1", QueueKeys(NS, "pub1-raw").pending
        for i in range(50):  # warm-up; the first publish also registers the queue
            self.producer.publish(queue, {"i": i})
            self.client.lpush(raw_key, json.dumps({"body": {"i": i}, "ts": time.time()}))
        smq, raw = [], []
        for i in range(n):  # interleaved, so drift hits both alike
            t0 = time.perf_counter_ns()
            self.producer.publish(queue, {"i": i})
            t1 = time.perf_counter_ns()
            self.client.lpush(raw_key, json.dumps({"body": {"i": i}, "ts": time.time()}))
            t2 = time.perf_counter_ns()
            smq.append(t1 - t0)
            raw.append(t2 - t1)
        before = common.command_calls(self.client)
        for i in range(100):
            self.producer.publish(queue, {"i": i})
        after = common.command_calls(self.client)
        delta = common.calls_delta(before, after)
        delta.pop("info", None)
        per_publish = sum(delta.values()) / 100
        self.client.delete(QueueKeys(NS, queue).pending, raw_key)
        return common.median(smq) / 1000.0, common.median(raw) / 1000.0, per_publish

    def close(self) -> None:
        self.children.stop(self.client)
        self.producer.close()
        self.client.close()


# --- report -------------------------------------------------------------------------------


def profile_report(path: str, top: int) -> str:
    buf = StringIO()
    stats = pstats.Stats(path, stream=buf)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def run_cases(bench: Bench, args: argparse.Namespace) -> dict[tuple[str, int], list[float]]:
    """Every timed run, ``--repeats`` per case, the kinds' order reversed every other repeat."""
    kinds = ("smqsup", "prio", "raw") if args.priority else ("smqsup", "raw")
    rates: dict[tuple[str, int], list[float]] = {}
    for nc in args.consumers:
        for rep in range(args.repeats):
            for kind in (kinds if rep % 2 == 0 else kinds[::-1]):
                rate = bench.consume_run(kind, nc)
                rates.setdefault((kind, nc), []).append(rate)
                print(f"  run: {kind:6s} x{nc}  {rate:9,.0f} msg/s", flush=True)
    return rates


def runs(rates: dict[tuple[str, int], list[float]], kind: str, nc: int) -> str:
    return ', '.join(f'{x:,.0f}' for x in rates[(kind, nc)])


def print_consumers(rates: dict[tuple[str, int], list[float]], args: argparse.Namespace) -> float:
    """The consumer table of the default mode; the worst smqsup / raw ratio."""
    print("\nConsumers, no-op handler (median msg/s; all runs in brackets)")
    print(f"{'consumers':>9} | {'smqsup':>9} | {'raw redis-py':>12} | {'ratio':>5} | target")
    worst = float("inf")
    for nc in args.consumers:
        s, r = common.median(rates[("smqsup", nc)]), common.median(rates[("raw", nc)])
        worst = min(worst, s / r)
        target = ">= 0.90" if nc == 2 else "-"
        print(f"{nc:>9} | {s:9,.0f} | {r:12,.0f} | {s / r:5.2f} | {target}"
              f"   [smqsup {runs(rates, 'smqsup', nc)}; raw {runs(rates, 'raw', nc)}]")
    return worst


def print_priority(rates: dict[tuple[str, int], list[float]], args: argparse.Namespace) -> float:
    """The consumer table of --priority; the worst prio / raw ratio."""
    print(f"\nConsumers, no-op handler (median msg/s; all runs in brackets); p0: every message at priority 0,"
          f"\n  p0-9: spread evenly over priorities 0-{LEVELS - 1}")
    print(f"{'consumers':>9} | {'smqsup p0':>9} | {'smqsup p0-9':>11} | {'raw redis-py':>12} | "
          f"{'p0/raw':>6} | {'p0-9/raw':>8} | {'p0-9/p0':>7}")
    worst = float("inf")
    for nc in args.consumers:
        s, p, r = (common.median(rates[(k, nc)]) for k in ("smqsup", "prio", "raw"))
        worst = min(worst, p / r)
        print(f"{nc:>9} | {s:9,.0f} | {p:11,.0f} | {r:12,.0f} | {s / r:6.2f} | {p / r:8.2f} | {p / s:7.2f}"
              f"   [p0 {runs(rates, 'smqsup', nc)}; p0-9 {runs(rates, 'prio', nc)}; raw {runs(rates, 'raw', nc)}]")
    return worst


def print_commands(bench: Bench) -> None:
    print("\nRedis commands per message, consumer side, last run of each case (INFO commandstats;"
          "\n  commands a Lua script runs are counted too: evalsha = 1 round trip doing lrem + lmove)")
    for (kind, nc), per in sorted(bench.cmds.items()):
        text = ", ".join(f"{k} {v:.3f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.0005)
        print(f"  {kind:6s} x{nc}: {sum(per.values()):.3f} total  ({text})")


def print_publishing(bench: Bench, args: argparse.Namespace) -> None:
    pm_s, pm_r = bench.publish_many_rate()
    rtt_s, rtt_r, per_pub = bench.single_publish_rtt()
    print("\nPublishing (ratio = smqsup speed / raw speed)")
    print(f"{'':38} | {'smqsup':>10} | {'raw redis-py':>12} | ratio | target")
    print(f"{f'publish_many of {args.publish_many} (msg/s)':38} | {pm_s:10,.0f} | {pm_r:12,.0f} | "
          f"{pm_s / pm_r:5.2f} | >= 100,000 msg/s {'OK' if pm_s >= 100_000 else 'MISSED'}")
    print(f"{f'single publish, median of {args.single} (us)':38} | {rtt_s:10.1f} | {rtt_r:12.1f} | "
          f"{rtt_r / rtt_s:5.2f} | one round trip: {per_pub:.2f} Redis commands/publish")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per consumer run")
    parser.add_argument("--consumers", type=int, nargs="+", default=[1, 2], help="consumer counts")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--poll-ms", type=float, default=2.0, help="LLEN polling interval")
    parser.add_argument("--publish-many", type=int, default=10_000, help="messages in publish_many")
    parser.add_argument("--single", type=int, default=1_000, help="single publishes timed")
    parser.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                        help="cProfile one smqsup consumer (auto: if a ratio is below 0.9)")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--priority", action="store_true",
                        help="also time runs with the messages spread over priorities 0-9")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    print(f"smqsup throughput benchmark: {common.machine()}")
    with common.bench_server() as server:
        bench = Bench(server.url, args)
        try:
            version = bench.client.info("server")["redis_version"]
            print(f"redis-server {version}, unix socket, appendfsync everysec; "
                  f"{args.messages} messages per run, median of {args.repeats}\n")
            rates = run_cases(bench, args)
            worst = print_priority(rates, args) if args.priority else print_consumers(rates, args)
            print_commands(bench)
            if not args.priority:
                print_publishing(bench, args)
            if args.profile == "always" or (args.profile == "auto" and worst < 0.9):
                path = os.path.join(str(server.data_dir), "consumer.prof")
                kind = "prio" if args.priority else "smqsup"
                rate = bench.consume_run(kind, 1, profile_path=path)
                label = "priorities 0-9, " if args.priority else ""
                print(f"\ncProfile of one smqsup consumer ({label}1 consumer, {rate:,.0f} msg/s under the profiler)")
                print(profile_report(path, args.profile_top))
        except KeyboardInterrupt:
            print("\ninterrupted: stopping consumers and redis-server", file=sys.stderr)
            return 130
        except common.Terminated:
            print("\nterminated: stopping consumers and redis-server", file=sys.stderr)
            return 143
        finally:
            bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
