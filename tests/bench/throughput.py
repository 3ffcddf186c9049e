"""Throughput of smqsup against a minimal hand-written redis-py loop (DESIGN section 7).

    python tests/bench/throughput.py [--messages 20000] [--repeats 3] [--profile auto] [--priority]
    python tests/bench/throughput.py --handler redis2 --concurrency 1 4 --consumers 2

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

``--handler redis2 --concurrency 1 4``: short handlers. The handler makes two
Redis calls, INCR then RPUSH, pipelined (one round trip), on its own redis-py
client to the same server; smqsup runs it at each ``--concurrency`` (above 1:
the Consumer's event loop, the plain def handler on that many threads). The raw loop
becomes BLMOVE + the same handler + LREM, and a third kind, "bare", is the
raw loop with no handler at all (the default mode's raw); at each
concurrency above 1 the raw loop also runs on that many threads per process
(each thread its own client and list): what that many CPython threads doing
the loop get through, the GIL's ceiling for smqsup's threads. After every run
with the handler its counter must equal the messages (each ran once). The
table gives smqsup's ratio to both loops; targets at concurrency 4: >= 2x the
loop with the handler, >= 1x the bare loop. ``--concurrency`` with the
default no-op handler times smqsup at each concurrency against the raw loop.
Without these options the output and the runs are the default mode's above.

A private redis-server (unix socket, appendfsync everysec) in a temp dir is
started and stopped by this script; Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
#: Priorities the messages of a "prio" run are spread over (0-9).
LEVELS = 10


#: What the redis2 handler INCRs and RPUSHes to (the parent checks and deletes them after each run).
COUNTER_KEY, LOG_KEY = f"{NS}:bench:redis2:count", f"{NS}:bench:redis2:log"


def noop(message: Any) -> None:
    """The benchmark handler: does nothing."""


def redis2_handler(url: str) -> Callable[[Any], None]:
    """The "redis2" handler of a process: two Redis calls, INCR then RPUSH,
    pipelined (one round trip), on its own redis-py client (made here, after
    the fork; its pool gives each handler thread a connection of its own)."""
    client = redis.Redis.from_url(url)

    def redis2(message: Any) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.incr(COUNTER_KEY)
        pipe.rpush(LOG_KEY, b"1")
        pipe.execute()

    return redis2


def make_handler(name: str, url: str) -> Callable[[Any], None]:
    return noop if name == "noop" else redis2_handler(url)


# --- consumer processes (run in forked children) --------------------------------------


def smq_worker(url: str, queue: str, out: Any, profile_path: Optional[str], handler: str, concurrency: int) -> None:
    consumer = common.run_consumer(url, queue, make_handler(handler, url), profile_path, concurrency)
    out.put(("smqsup", os.getpid(), consumer.stats.received, consumer.stats.acked, common.peak_rss_bytes()))


def raw_worker(url: str, queue: str, out: Any, profile_path: Optional[str], handler: str, concurrency: int) -> None:
    """BLMOVE, the handler (none for "noop": the plain loop), LREM; one message at a time, on each of
    ``concurrency`` threads (each its own client and list: the most N threads doing this loop get
    through one CPython process, GIL and all)."""
    state = {"stop": False}
    common.child_signals(lambda: state.__setitem__("stop", True))
    keys = QueueKeys(NS, queue)
    counts = [0] * concurrency

    def loop(i: int) -> None:
        call = None if handler == "noop" else make_handler(handler, url)
        cid = f"raw-{os.getpid()}-{i}"
        pending, proc = keys.pending, keys.processing(cid)
        r = redis.Redis.from_url(url)
        r.hset(keys.consumers, cid, "{}")  # so the parent finds our list and counts us ready
        while not state["stop"]:
            frame = r.blmove(pending, proc, 1, "RIGHT", "LEFT")
            if frame is None:
                continue
            if call is not None:
                call(frame)
            r.lrem(proc, 1, frame)
            counts[i] += 1
        r.hdel(keys.consumers, cid)
        r.close()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(1, concurrency)]
    for th in threads:
        th.start()
    loop(0)
    for th in threads:
        th.join()
    n = sum(counts)
    out.put(("raw", os.getpid(), n, n, common.peak_rss_bytes()))


WORKERS: dict[str, Callable[..., None]] = {"smqsup": smq_worker, "prio": smq_worker, "raw": raw_worker,
                                           "bare": raw_worker}


def label(kind: str, concurrency: int) -> str:
    """A case's name in the runs and tables: the kind, with its concurrency above 1."""
    return kind if concurrency == 1 else f"{kind} c{concurrency}"


# --- one timed consumer run ------------------------------------------------------------


class Bench:
    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url
        self.args = args
        self.client = redis.Redis.from_url(url)
        self.producer = Producer(url, NS)
        self.bodies = [{"i": i} for i in range(args.messages)]
        #: What each consumer of the last run reported: (kind, pid, received, acked, peak RSS bytes).
        self.results: list[tuple[Any, ...]] = []
        self.children = common.Children()
        self.run_no = 0
        self.cmds: dict[tuple[str, int], dict[str, float]] = {}

    def spawn(self, kind: str, queue: str, out: Any, profile_path: Optional[str], concurrency: int) -> None:
        """Fork one consumer process of ``kind``. Kind "bare" runs the raw
        loop without the handler; "raw" and "smqsup" run ``--handler``."""
        self.children.start(WORKERS[kind], self.url, queue, out, profile_path,
                            "noop" if kind == "bare" else self.args.handler, concurrency)

    def consume_run(self, kind: str, n_consumers: int, profile_path: Optional[str] = None,
                    concurrency: int = 1, messages: int = 0) -> float:
        """One timed run of ``messages`` (default ``--messages``); returns
        messages per second. A run in which no message is taken for
        ``--stall-s`` raises (a stuck consumer, not a slow one)."""
        self.run_no += 1
        queue = f"tp{self.run_no}"
        keys = QueueKeys(NS, queue)
        stage = QueueKeys(NS, f"tp{self.run_no}stage")
        n = messages or self.args.messages
        out = common.CTX.SimpleQueue()
        try:
            for _ in range(n_consumers):
                self.spawn(kind, queue, out, profile_path, concurrency)
            common.wait_ready(self.client, keys.consumers, n_consumers, children=self.children)
            moves = self.stage(kind, stage, keys, n)
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
            stall_s = self.args.stall_s
            before = common.command_calls(self.client)
            t0 = time.perf_counter()
            self.release(moves)  # wakes the blocked consumers
            left, moved = n, t0
            while True:
                time.sleep(sleep_s)
                now_left = remaining()
                if not now_left:
                    break
                if now_left != left:
                    left, moved = now_left, time.perf_counter()
                elif time.perf_counter() - moved > stall_s:
                    raise RuntimeError(f"{label(kind, concurrency)} x{n_consumers}: {left} of {n} messages "
                                       f"still queued or in flight, none taken for {stall_s:g} s")
            elapsed = time.perf_counter() - t0
            after = common.command_calls(self.client)
        finally:
            self.children.stop(self.client)
        results = []
        while not out.empty():
            results.append(out.get())
        self.results = results
        done = sum(r[3] for r in results)
        name = label(kind, concurrency)
        if done != n:
            print(f"  WARNING: {name} x{n_consumers}: consumers report {done} acked of {n}", file=sys.stderr)
        self.check_handler(kind, name, n_consumers, n)
        # commands sent by consumers per message (the parent's polling excluded)
        delta = common.calls_delta(before, after)
        for ours in ("llen", "rename", "info", "zcard", "multi", "exec"):
            delta.pop(ours, None)
        self.cmds[(name, n_consumers)] = {k: v / n for k, v in delta.items()}
        return n / elapsed

    def check_handler(self, kind: str, name: str, n_consumers: int, n: int) -> None:
        """After a run: the redis2 handler ran once per message (its counter);
        its keys are deleted for the next run."""
        if self.args.handler == "noop":
            return
        count = int(self.client.get(COUNTER_KEY) or 0)
        expected = 0 if kind == "bare" else n
        if count != expected:
            print(f"  WARNING: {name} x{n_consumers}: the handler ran {count} times for {expected} messages",
                  file=sys.stderr)
        self.client.delete(COUNTER_KEY, LOG_KEY)

    def stage(self, kind: str, stage: QueueKeys, keys: QueueKeys, n: int) -> list[tuple[str, str]]:
        """Publish the run's ``n`` messages to the staging queue: all at
        priority 0, or (kind "prio") one publish_many per priority 0-9; the
        RENAMEs (staged key, consumed key) that release them, the pending list last."""
        if len(self.bodies) < n:
            self.bodies = [{"i": i} for i in range(n)]
        if kind != "prio":
            self.producer.publish_many(stage.queue, self.bodies[:n])
            if self.client.llen(stage.pending) != n:
                raise RuntimeError("staging list does not hold every message")
            return [(stage.pending, keys.pending)]
        per = -(-n // LEVELS)
        bodies = self.bodies[:n]
        for p in range(LEVELS):
            if bodies[p * per:(p + 1) * per]:
                self.producer.publish_many(stage.queue, bodies[p * per:(p + 1) * per], priority=p)
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


def cases(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(kind, concurrency) of every run of one repeat, in order."""
    if args.priority:
        return [("smqsup", 1), ("prio", 1), ("raw", 1)]
    found = [("smqsup", c) for c in args.concurrency] + [("raw", 1)]
    if args.handler == "noop":
        return found
    return found + [("raw", c) for c in args.concurrency if c > 1] + [("bare", 1)]


def run_cases(bench: Bench, args: argparse.Namespace) -> dict[tuple[str, int], list[float]]:
    """Every timed run, ``--repeats`` per case, the cases' order reversed every other repeat."""
    order = cases(args)
    width = max(len(label(kind, c)) for kind, c in order)
    rates: dict[tuple[str, int], list[float]] = {}
    for nc in args.consumers:
        for rep in range(args.repeats):
            for kind, concurrency in (order if rep % 2 == 0 else order[::-1]):
                rate = bench.consume_run(kind, nc, concurrency=concurrency)
                name = label(kind, concurrency)
                rates.setdefault((name, nc), []).append(rate)
                print(f"  run: {name:{width}s} x{nc}  {rate:9,.0f} msg/s", flush=True)
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


def print_handler(rates: dict[tuple[str, int], list[float]], args: argparse.Namespace) -> float:
    """The consumer table of --handler / --concurrency; the worst smqsup / raw ratio."""
    bare = args.handler != "noop"
    what = ("redis2: INCR + RPUSH pipelined on its own client" if bare else "no-op")
    print(f"\nConsumers, handler {what} (median msg/s; all runs in brackets)"
          + ("\n  raw: BLMOVE + the handler + LREM; bare: BLMOVE + LREM, no handler" if bare else ""))
    print(f"{'consumers':>9} | {'concurrency':>11} | {'smqsup':>9} | {'raw redis-py':>12} | {'ratio':>5}"
          + (f" | {'bare loop':>9} | {'/bare':>5}" if bare else "") + " | target")
    worst = float("inf")
    for nc in args.consumers:
        r = common.median(rates[("raw", nc)])
        b = common.median(rates[("bare", nc)]) if bare else 0.0
        for c in args.concurrency:
            name = label("smqsup", c)
            s = common.median(rates[(name, nc)])
            worst = min(worst, s / r)
            line = f"{nc:>9} | {c:>11} | {s:9,.0f} | {r:12,.0f} | {s / r:5.2f}"
            if bare:
                line += f" | {b:9,.0f} | {s / b:5.2f}"
            line += f" | {handler_target(args, nc, c, s / r, s / b if bare else 0.0)}"
            threads = (label("raw", c), nc)
            if c > 1 and threads in rates:
                t = common.median(rates[threads])
                line += f" | raw loop on {c} threads {t:,.0f}: {s / t:.2f}"
            print(f"{line}   [{name} {runs(rates, name, nc)}]")
        print(f"{'':>9}   raw {runs(rates, 'raw', nc)}" + (f"; bare {runs(rates, 'bare', nc)}" if bare else "")
              + "".join(f"; raw c{c} {runs(rates, label('raw', c), nc)}" for c in args.concurrency
                        if c > 1 and (label("raw", c), nc) in rates))
    return worst


def handler_target(args: argparse.Namespace, nc: int, concurrency: int, to_raw: float, to_bare: float) -> str:
    """The target column of one row of the --handler table."""
    if args.handler == "noop":
        return ">= 0.90" if nc == 2 and concurrency == 1 else "-"
    if concurrency != 4:
        return "-"
    ok = to_raw >= 2.0 and to_bare >= 1.0
    return f">= 2.00 raw, >= 1.00 bare: {'OK' if ok else 'MISSED'}"


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
    parser.add_argument("--stall-s", type=float, default=30.0,
                        help="a run in which no message is taken this long fails (default 30)")
    parser.add_argument("--publish-many", type=int, default=10_000, help="messages in publish_many")
    parser.add_argument("--single", type=int, default=1_000, help="single publishes timed")
    parser.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                        help="cProfile one smqsup consumer (auto: if a ratio is below 0.9)")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--priority", action="store_true",
                        help="also time runs with the messages spread over priorities 0-9")
    parser.add_argument("--handler", choices=("noop", "redis2"), default="noop",
                        help="the consumers' handler: noop, or redis2 (INCR + RPUSH pipelined, its own client)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1],
                        help="smqsup concurrency per consumer process, each a case (default 1)")
    args = parser.parse_args()
    if args.priority and (args.handler != "noop" or args.concurrency != [1]):
        parser.error("--priority runs the no-op handler at concurrency 1 only")
    return args


def plain(args: argparse.Namespace) -> bool:
    """The default mode: the no-op handler at concurrency 1 (the standing throughput figure)."""
    return args.handler == "noop" and args.concurrency == [1]


def main() -> int:
    args = parse_args()
    print(f"smqsup throughput benchmark: {common.machine()}")
    with common.bench_server() as server:
        bench = Bench(server.url, args)
        try:
            version = bench.client.info("server")["redis_version"]
            over = "unix socket" if server.port is None else "TCP loopback"
            print(f"redis-server {version}, {over}, appendfsync everysec; "
                  f"{args.messages} messages per run, median of {args.repeats}\n")
            if not plain(args):
                print(f"handler {args.handler}, smqsup concurrency {', '.join(map(str, args.concurrency))}\n")
            rates = run_cases(bench, args)
            if args.priority:
                worst = print_priority(rates, args)
            else:
                worst = print_consumers(rates, args) if plain(args) else print_handler(rates, args)
            print_commands(bench)
            if plain(args) and not args.priority:
                print_publishing(bench, args)
            if args.profile == "always" or (args.profile == "auto" and worst < 0.9):
                path = os.path.join(str(server.data_dir), "consumer.prof")
                kind = "prio" if args.priority else "smqsup"
                concurrency = args.concurrency[0]
                rate = bench.consume_run(kind, 1, profile_path=path, concurrency=concurrency)
                what = "priorities 0-9, " if args.priority else ""
                if not plain(args):
                    what = f"handler {args.handler}, concurrency {concurrency}, the loop's thread only, "
                print(f"\ncProfile of one smqsup consumer ({what}1 consumer, {rate:,.0f} msg/s under the profiler)")
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
