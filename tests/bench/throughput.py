"""Throughput of smqsup against a minimal hand-written redis-py loop (DESIGN section 7).

    python tests/bench/throughput.py [--messages 20000] [--repeats 3] [--profile auto] [--priority]
    python tests/bench/throughput.py --handler redis2 --concurrency 1 4 --consumers 2
    python tests/bench/throughput.py --handler incr --prefetch 1 8 32 --consumers 2

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

``--handler incr|incr2|redis2 --concurrency 1 4``: short handlers, each on
its own redis-py client to the same server (made after the fork): incr one
INCR; incr2 INCR then RPUSH, two round trips; redis2 the same two calls
pipelined, one round trip. smqsup runs the handler at each ``--concurrency``
(above 1: the Consumer's event loop, the plain def handler on that many
threads). The raw loop becomes BLMOVE + the same handler + LREM, and a third
kind, "bare", is the raw loop with no handler at all (the default mode's
raw); at each concurrency above 1 the raw loop also runs on that many threads
per process (each thread its own client and list): what that many CPython
threads doing the loop get through, the GIL's ceiling for smqsup's threads.
After every run with the handler its counter must equal the messages (each
ran once), and so must the list incr2 and redis2 push to.

``--prefetch 1 8 32``: the queue option ``prefetch`` (frames a consumer takes
in one round trip), each value its own smqsup case ("smqsup p32", "smqsup c4
p32"), at every ``--concurrency``; the raw and bare loops are the same
baselines, run alternating with them. It works with every handler, noop too.

With any of ``--handler``, ``--concurrency`` or ``--prefetch``, one table row
per (consumers, concurrency, prefetch): smqsup's msg/s, the raw loop with the
same handler and smqsup's ratio to it, the bare loop and the ratio to it (for
noop the raw loop is the bare loop), and the targets: at prefetch 32,
concurrency 1, 2 consumers >= 3x the raw loop for noop and >= 2x for a
handler making Redis calls; at prefetch 1, concurrency 4, a Redis handler
>= 2x the loop with the handler and >= 1x the bare loop; noop at prefetch 1,
concurrency 1, 2 consumers >= 0.9x. Without these options the output and the
runs are the default mode's above.

A private redis-server (unix socket, or TCP loopback with SMQSUP_BENCH_TCP=1;
appendfsync everysec) in a temp dir is started and stopped by this script;
Ctrl-C stops everything it started. The handlers and consumer processes are in
_throughput_workers.py, the consumer tables in _throughput_report.py, the
publishing figures in _throughput_publish.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402
from _throughput_publish import print_publishing  # noqa: E402
from _throughput_report import (  # noqa: E402
    LEVELS,
    print_commands,
    print_consumers,
    print_handler,
    print_priority,
    profile_report,
)
from _throughput_workers import COUNTER_KEY, HANDLERS, LOG_KEY, LOGGING_HANDLERS, WORKERS, label  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.config import model  # noqa: E402

#: The largest prefetch (1 on a commit before prefetch: this script runs there too, for ABBA).
PREFETCH_MAX: int = getattr(model, "PREFETCH_MAX", 1)
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
#: One run of one repeat: (kind, concurrency, prefetch).
Case = tuple[str, int, int]


# --- one timed consumer run ------------------------------------------------------------


class Bench:
    """The timed consumer runs against one server: its client, a producer,
    and the consumer processes of the run under way (stopped after each run
    and by ``close``)."""

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
        #: Redis commands per message of each case's last run: {(label, consumers): {command: calls / messages}}.
        self.cmds: dict[tuple[str, int], dict[str, float]] = {}

    def spawn(self, kind: str, queue: str, out: Any, profile_path: Optional[str], concurrency: int,
              prefetch: int) -> None:
        """Fork one consumer process of ``kind``. Kind "bare" runs the raw
        loop without the handler; "raw" and "smqsup" run ``--handler``."""
        self.children.start(WORKERS[kind], self.url, queue, out, profile_path,
                            "noop" if kind == "bare" else self.args.handler, concurrency, prefetch)

    def consume_run(self, kind: str, n_consumers: int, profile_path: Optional[str] = None,
                    concurrency: int = 1, prefetch: int = 1, messages: int = 0) -> float:
        """One timed run of ``messages`` (default ``--messages``); returns
        messages per second. A run in which no message is taken for
        ``--stall-s`` raises (a stuck consumer, not a slow one)."""
        self.run_no += 1
        queue = f"tp{self.run_no}"
        keys, stage = QueueKeys(NS, queue), QueueKeys(NS, f"tp{self.run_no}stage")
        n = messages or self.args.messages
        name = label(kind, concurrency, prefetch)
        out = common.CTX.SimpleQueue()
        try:
            for _ in range(n_consumers):
                self.spawn(kind, queue, out, profile_path, concurrency, prefetch)
            common.wait_ready(self.client, keys.consumers, n_consumers, children=self.children)
            moves = self.stage(kind, stage, keys, n)
            remaining = self.remaining(kind, keys)  # before the command count: its HKEYS is not the consumers'
            before = common.command_calls(self.client)
            t0 = time.perf_counter()
            self.release(moves)  # wakes the blocked consumers
            self.wait_drained(remaining, f"{name} x{n_consumers}", n)
            elapsed = time.perf_counter() - t0
            after = common.command_calls(self.client)
        finally:
            self.children.stop(self.client)
        self.results = []
        while not out.empty():
            self.results.append(out.get())
        done = sum(r[3] for r in self.results)
        if done != n:
            print(f"  WARNING: {name} x{n_consumers}: consumers report {done} acked of {n}", file=sys.stderr)
        self.check_handler(kind, name, n_consumers, n)
        # commands sent by consumers per message (the parent's polling excluded)
        delta = common.calls_delta(before, after)
        for ours in ("llen", "rename", "info", "zcard", "multi", "exec"):
            delta.pop(ours, None)
        self.cmds[(name, n_consumers)] = {k: v / n for k, v in delta.items()}
        return n / elapsed

    def remaining(self, kind: str, keys: QueueKeys) -> Callable[[], int]:
        """A probe of the messages a run still has queued or in flight: the
        pending list, every consumer's list (registered now), and for "prio" the priority set."""
        poll_keys = [keys.pending, *(keys.processing(cid.decode()) for cid in self.client.hkeys(keys.consumers))]

        def left() -> int:
            pipe = self.client.pipeline(transaction=False)  # execute() empties a pipeline
            for name in poll_keys:
                pipe.llen(name)
            if kind == "prio":
                pipe.zcard(keys.priority)
            return sum(pipe.execute())

        return left

    def wait_drained(self, remaining: Callable[[], int], what: str, n: int) -> None:
        """Poll ``remaining`` every ``--poll-ms`` until it is 0; raise when it
        has not moved for ``--stall-s``."""
        sleep_s, stall_s = self.args.poll_ms / 1000.0, self.args.stall_s
        left, moved = n, time.perf_counter()
        while True:
            time.sleep(sleep_s)
            now_left = remaining()
            if not now_left:
                return
            if now_left != left:
                left, moved = now_left, time.perf_counter()
            elif time.perf_counter() - moved > stall_s:
                raise RuntimeError(f"{what}: {left} of {n} messages still queued or in flight, "
                                   f"none taken for {stall_s:g} s")

    def check_handler(self, kind: str, name: str, n_consumers: int, n: int) -> None:
        """After a run: the handler ran once per message (its counter, and the
        list incr2 and redis2 push to); its keys are deleted for the next run."""
        if self.args.handler == "noop":
            return
        expected = 0 if kind == "bare" else n
        counts = {"counter": int(self.client.get(COUNTER_KEY) or 0)}
        if self.args.handler in LOGGING_HANDLERS:
            counts["list"] = self.client.llen(LOG_KEY)
        for what, count in counts.items():
            if count != expected:
                print(f"  WARNING: {name} x{n_consumers}: the handler's {what} shows {count} runs "
                      f"for {expected} messages", file=sys.stderr)
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

    def close(self) -> None:
        self.children.stop(self.client)
        self.producer.close()
        self.client.close()


# --- the runs ---------------------------------------------------------------------------


def cases(args: argparse.Namespace) -> list[Case]:
    """(kind, concurrency, prefetch) of every run of one repeat, in order:
    smqsup at each concurrency and prefetch, then the baselines (prefetch 1:
    the loops take one frame per round trip)."""
    if args.priority:
        return [("smqsup", 1, 1), ("prio", 1, 1), ("raw", 1, 1)]
    found = [("smqsup", c, p) for c in args.concurrency for p in args.prefetch] + [("raw", 1, 1)]
    if args.handler == "noop":
        return found
    return found + [("raw", c, 1) for c in args.concurrency if c > 1] + [("bare", 1, 1)]


def run_cases(bench: Bench, args: argparse.Namespace) -> dict[tuple[str, int], list[float]]:
    """Every timed run, ``--repeats`` per case, the cases' order reversed every other repeat."""
    order = cases(args)
    width = max(len(label(*case)) for case in order)
    rates: dict[tuple[str, int], list[float]] = {}
    for nc in args.consumers:
        for rep in range(args.repeats):
            for kind, concurrency, prefetch in (order if rep % 2 == 0 else order[::-1]):
                rate = bench.consume_run(kind, nc, concurrency=concurrency, prefetch=prefetch)
                name = label(kind, concurrency, prefetch)
                rates.setdefault((name, nc), []).append(rate)
                print(f"  run: {name:{width}s} x{nc}  {rate:9,.0f} msg/s", flush=True)
    return rates


def profile_run(bench: Bench, args: argparse.Namespace, data_dir: str, case: tuple[int, int]) -> None:
    """cProfile one smqsup consumer at ``case`` (concurrency, prefetch) over one run, and print it."""
    path = os.path.join(data_dir, "consumer.prof")
    kind = "prio" if args.priority else "smqsup"
    concurrency, prefetch = case
    rate = bench.consume_run(kind, 1, profile_path=path, concurrency=concurrency, prefetch=prefetch)
    what = "priorities 0-9, " if args.priority else ""
    if not plain(args):
        what = f"handler {args.handler}, concurrency {concurrency}, prefetch {prefetch}, the loop's thread only, "
    print(f"\ncProfile of one smqsup consumer ({what}1 consumer, {rate:,.0f} msg/s under the profiler)")
    print(profile_report(path, args.profile_top))


# --- main ---------------------------------------------------------------------------------


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
                        help="cProfile one smqsup consumer, at the case of the worst ratio (auto: if it is below 0.9)")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--priority", action="store_true",
                        help="also time runs with the messages spread over priorities 0-9")
    parser.add_argument("--handler", choices=HANDLERS, default="noop",
                        help="the consumers' handler: noop; incr (one INCR), incr2 (INCR then RPUSH, two round "
                             "trips) or redis2 (INCR + RPUSH pipelined), each on its own client")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1],
                        help="smqsup concurrency per consumer process, each a case (default 1)")
    parser.add_argument("--prefetch", type=int, nargs="+", default=[1],
                        help=f"smqsup prefetch (frames per take, 1-{PREFETCH_MAX}), each a case (default 1)")
    args = parser.parse_args()
    if any(not 1 <= p <= PREFETCH_MAX for p in args.prefetch):
        parser.error(f"--prefetch takes values from 1 to {PREFETCH_MAX}")
    if args.priority and (args.handler != "noop" or args.concurrency != [1] or args.prefetch != [1]):
        parser.error("--priority runs the no-op handler at concurrency 1 and prefetch 1 only")
    return args


def plain(args: argparse.Namespace) -> bool:
    """The default mode: the no-op handler at concurrency 1, prefetch 1 (the standing throughput figure)."""
    return args.handler == "noop" and args.concurrency == [1] and args.prefetch == [1]


def report(bench: Bench, args: argparse.Namespace, data_dir: str) -> None:
    """Run every case and print the mode's tables, and the profile if asked for (of the worst row's case)."""
    rates = run_cases(bench, args)
    if args.priority:
        worst = print_priority(rates, args)
    else:
        worst = print_consumers(rates, args) if plain(args) else print_handler(rates, args)
    print_commands(bench.cmds)
    if plain(args) and not args.priority:
        print_publishing(bench.client, bench.producer, args)
    if args.profile == "always" or (args.profile == "auto" and worst[0] < 0.9):
        profile_run(bench, args, data_dir, worst[1])  # the case of the table's worst ratio


def main() -> int:
    args = parse_args()
    print(f"smqsup throughput benchmark: {common.machine()}")
    with common.bench_server() as server:
        bench = Bench(server.url, args)
        try:
            with common.interruptible("consumers and redis-server"):
                version = bench.client.info("server")["redis_version"]
                print(f"redis-server {version}, {common.transport(server)}, appendfsync everysec; "
                      f"{args.messages} messages per run, median of {args.repeats}\n")
                if not plain(args):
                    print(f"handler {args.handler}, smqsup concurrency {', '.join(map(str, args.concurrency))}, "
                          f"prefetch {', '.join(map(str, args.prefetch))}\n")
                report(bench, args, str(server.data_dir))
        finally:
            bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
