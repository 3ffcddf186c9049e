"""Throughput of message groups (issue: 10,000 groups x 10 messages at >= 0.8x the same messages without groups).

    python tests/bench/groups.py [--groups 10000] [--per-group 10] [--repeats 2] [--prefetch 1]
    python tests/bench/groups.py --group-concurrency 1 --prefetch 1 32
    python tests/bench/groups.py --groups 1000 --per-group 10 --repeats 1     (a quick run)

Three cases, the same ``--groups`` x ``--per-group`` messages each (100,000
by default), drained by ``--consumers`` (2) smqsup consumer processes (fork,
no-op handler, concurrency 1: throughput.py's consumers), at each
``--prefetch`` (default 1, as throughput.py's default mode):

- baseline:  published without a group, ``publish_many`` of ``--per-group``
             bodies per call, ``--groups`` calls;
- groups:    the same calls, each ``publish_many(..., group=f"g{i}")``: one
             group of ``--per-group`` messages per call;
- one group: the same calls, every one ``group="g0"``: all in one group.

``--group-concurrency N`` (0: none) is the queue option group_concurrency
of the grouped cases' consumers (the baseline's have no group to bound).
The cases rotate baseline / groups / one group, reversed every other repeat
(ABBA), ``--repeats`` (2) runs each, the median msg/s reported, and the
ratio to the baseline as the median of the repeats' ratios (each repeat's
runs are side by side in time, so a machine whose speed drifts between
repeats moves both; target: groups / baseline >= 0.80).

Method (throughput.py's; process startup and publishing are excluded from
the clock): the consumers start on an empty queue; once all are registered
AND blocked in BLMOVE (INFO blocked_clients), the messages, already
published to a staging queue, are moved into the consumed queue by one
RENAME of the pending list (baseline) or one MULTI of RENAMEs (grouped:
every group key the publishes made, QueueKeys.groups, the sequence counter,
then the pending list, which holds the groups' tickets), which wakes the
blocked consumers.
The clock runs from there until the pending list, every processing list and
(grouped) the groups' ready set are empty (polled every ``--poll-ms``).
After each run the consumers' acks must equal the messages, and (grouped)
every group key must be gone (no group left with a state, a count or a
frame running).

Beside the msg/s, per case (last run): the redis-server's CPU time per
message (INFO cpu) and its share of the run's wall time; the consumers' CPU
time per message (getrusage in each consumer process, its startup included);
EVALSHA calls and the µs Redis spent in them per message (INFO
commandstats), split into the µs of the commands the scripts ran and the
rest (Lua itself); and the Redis commands per message (commands a Lua
script runs counted too; this script's own polling subtracted exactly).
``--profile auto`` (the default) cProfiles one grouped consumer over one
more run (1 consumer) when a grouped ratio is below the target.

A private redis-server (unix socket, or TCP loopback with
SMQSUP_BENCH_TCP=1; appendfsync everysec) in a temp dir is started and
stopped by this script; Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402
from _throughput_report import print_commands, profile_report  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.config import model  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
PREFETCH_MAX: int = getattr(model, "PREFETCH_MAX", 1)
#: The issue's target: grouped msg/s over the baseline's.
TARGET = 0.80
#: The cases of one repeat, in order (reversed every other repeat).
CASES = ("baseline", "groups", "one group")
#: One run: (case, prefetch).
Run = tuple[str, int]


# --- the consumer processes (forked) ------------------------------------------------------


def noop(message: Any) -> None:
    """The no-op handler."""


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def group_worker(url: str, queue: str, out: Any, profile_path: Optional[str], prefetch: int,
                 group_concurrency: int) -> None:
    """The smqsup consumer of ``queue`` (no-op handler, concurrency 1) until SIGTERM; puts
    (pid, received, acked, CPU seconds since the fork) on ``out``."""
    cpu0 = _cpu_s()
    options: dict[str, Any] = {"prefetch": prefetch}
    if group_concurrency:
        options["group_concurrency"] = group_concurrency
    consumer = common.run_consumer(url, queue, noop, profile_path, 1, **options)
    out.put((os.getpid(), consumer.stats.received, consumer.stats.acked, _cpu_s() - cpu0))


# --- one timed consumer run ------------------------------------------------------------


def server_stats(client: "redis.Redis[bytes]") -> tuple[float, dict[str, tuple[int, int]]]:
    """(redis-server CPU seconds, user + system, {command: (calls, µs)}) since it started."""
    cpu = client.info("cpu")
    stats = client.info("commandstats")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
            {name.split("_", 1)[1]: (int(v["calls"]), int(v["usec"])) for name, v in stats.items()})


class Bench:
    """The timed runs against one server: its client, a producer, the
    consumer processes of the run under way (stopped after each run and by
    ``close``), and what the last run of each (case, prefetch) cost."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url
        self.args = args
        self.client = redis.Redis.from_url(url)
        self.producer = Producer(url, NS)
        self.n = args.groups * args.per_group
        self.chunks = [[{"i": g * args.per_group + j} for j in range(args.per_group)] for g in range(args.groups)]
        self.children = common.Children()
        self.run_no = 0
        #: Redis commands per message of each run's last run: {(label, consumers): {command: calls / messages}}.
        self.cmds: dict[tuple[str, int], dict[str, float]] = {}
        #: Per (case, prefetch), its last run: redis CPU µs/msg, redis busy share, consumers' CPU µs/msg,
        #: EVALSHA calls/msg, µs in EVALSHA/msg, of which µs in the commands the scripts ran.
        self.costs: dict[Run, tuple[float, float, float, float, float, float]] = {}

    def spawn(self, queue: str, out: Any, profile_path: Optional[str], prefetch: int, grouped: bool) -> None:
        self.children.start(group_worker, self.url, queue, out, profile_path, prefetch,
                            self.args.group_concurrency if grouped else 0)

    def consume_run(self, case: str, prefetch: int, n_consumers: int, profile_path: Optional[str] = None) -> float:
        """One timed run of ``case``; returns messages per second. A run in
        which no message is taken for ``--stall-s`` raises."""
        self.run_no += 1
        queue = f"gr{self.run_no}"
        keys, stage = QueueKeys(NS, queue), QueueKeys(NS, f"gr{self.run_no}stage")
        grouped = case != "baseline"
        n = self.n
        out = common.CTX.SimpleQueue()
        try:
            for _ in range(n_consumers):
                self.spawn(queue, out, profile_path, prefetch, grouped)
            common.wait_ready(self.client, keys.consumers, n_consumers, children=self.children)
            moves = self.stage(case, stage, keys)
            remaining, poll_keys = self.remaining(grouped, keys)
            polls = [0]

            def left() -> int:
                polls[0] += 1
                return remaining()

            cpu0, before = server_stats(self.client)
            t0 = time.perf_counter()
            self.release(moves)  # wakes the blocked consumers
            self.wait_drained(left, f"{case} p{prefetch} x{n_consumers}", n)
            elapsed = time.perf_counter() - t0
            cpu1, after = server_stats(self.client)
        finally:
            self.children.stop(self.client)
        results = []
        while not out.empty():
            results.append(out.get())
        done = sum(r[2] for r in results)
        if done != n:
            print(f"  WARNING: {case} p{prefetch} x{n_consumers}: consumers report {done} acked of {n}",
                  file=sys.stderr)
        if grouped:
            self.check_groups(keys, case)
        # commands the consumers sent per message: this script's own taken off exactly
        calls = {k: after[k][0] - before.get(k, (0, 0))[0] for k in after}
        calls["llen"] = calls.get("llen", 0) - polls[0] * poll_keys
        if grouped:
            calls["zcard"] = calls.get("zcard", 0) - polls[0]
        for ours in ("rename", "multi", "exec", "info"):
            calls.pop(ours, None)
        per = {k: v / n for k, v in calls.items() if v}
        if profile_path is None:
            self.cmds[(f"{case} p{prefetch}", n_consumers)] = per
            us = {k: after[k][1] - before.get(k, (0, 0))[1] for k in after}
            evalsha_us = us.pop("evalsha", 0)
            # µs of the commands the scripts ran (the parent's polls' share of LLEN and ZCARD taken off)
            for ours in ("llen", "zcard"):
                total = after.get(ours, (0, 0))[0] - before.get(ours, (0, 0))[0]
                us[ours] = us.get(ours, 0) * calls.get(ours, 0) / total if total else 0
            inner_us = sum(v for k, v in us.items() if k in calls)
            self.costs[(case, prefetch)] = ((cpu1 - cpu0) / n * 1e6, (cpu1 - cpu0) / elapsed,
                                            sum(r[3] for r in results) / n * 1e6, per.get("evalsha", 0.0),
                                            evalsha_us / n, inner_us / n)
        return n / elapsed

    def remaining(self, grouped: bool, keys: QueueKeys) -> tuple[Callable[[], int], int]:
        """A probe of the messages a run still has queued or in flight (the
        pending list, every consumer's list, and when grouped the groups'
        ready set), and the LLENs it sends each time."""
        poll_keys = [keys.pending, *(keys.processing(cid.decode()) for cid in self.client.hkeys(keys.consumers))]
        ready = keys.groups[0]

        def left() -> int:
            pipe = self.client.pipeline(transaction=False)
            for name in poll_keys:
                pipe.llen(name)
            if grouped:
                pipe.zcard(ready)
            return sum(pipe.execute())

        return left, len(poll_keys)

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

    def check_groups(self, keys: QueueKeys, case: str) -> None:
        """After a grouped run: every group key is gone (no group left with a
        ready frame, a ticket, a state, a count or a frame running)."""
        left = [key.rsplit(":", 1)[-1] for key in keys.groups if self.client.exists(key)]
        if left:
            print(f"  WARNING: {case}: group keys left after the drain: {', '.join(left)}", file=sys.stderr)

    def stage(self, case: str, stage: QueueKeys, keys: QueueKeys) -> list[tuple[str, str]]:
        """Publish the run's messages to the staging queue, ``--per-group`` per
        publish_many (group none, g{i}, or g0 by case); the RENAMEs (staged
        key, consumed key) that release them, the pending list last."""
        for g, bodies in enumerate(self.chunks):
            group = None if case == "baseline" else "g0" if case == "one group" else f"g{g}"
            self.producer.publish_many(stage.queue, bodies, group=group)
        if case == "baseline":
            if self.client.llen(stage.pending) != self.n:
                raise RuntimeError("staging list does not hold every message")
            return [(stage.pending, keys.pending)]
        tickets = self.client.llen(stage.pending)
        expect = 1 if case == "one group" else self.args.groups
        if self.client.zcard(stage.groups[0]) != self.n or tickets != expect:
            raise RuntimeError(f"staging: {self.client.zcard(stage.groups[0])} grouped frames ready of {self.n}, "
                               f"{tickets} tickets of {expect}")
        moves = list(zip(stage.groups, keys.groups)) + [(stage.priority_seq, keys.priority_seq)]
        return [(src, dst) for src, dst in moves if self.client.exists(src)] + [(stage.pending, keys.pending)]

    def release(self, moves: list[tuple[str, str]]) -> None:
        """Move the staged messages into the consumed queue at once (the
        RENAME of the pending list wakes the consumers blocked in BLMOVE on it)."""
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


# --- the runs and the tables ------------------------------------------------------------


def run_cases(bench: Bench, args: argparse.Namespace) -> dict[Run, list[float]]:
    """Every timed run, ``--repeats`` per (case, prefetch), the order reversed every other repeat."""
    order = [(case, p) for p in args.prefetch for case in CASES]
    rates: dict[Run, list[float]] = {}
    for rep in range(args.repeats):
        for case, prefetch in (order if rep % 2 == 0 else order[::-1]):
            rate = bench.consume_run(case, prefetch, args.consumers)
            rates.setdefault((case, prefetch), []).append(rate)
            print(f"  run: {case:9s} p{prefetch:<3d} x{args.consumers}  {rate:9,.0f} msg/s", flush=True)
    return rates


def runs(rates: dict[Run, list[float]], run: Run) -> str:
    return ", ".join(f"{x:,.0f}" for x in rates[run])


def print_rates(rates: dict[Run, list[float]], args: argparse.Namespace) -> tuple[float, Run]:
    """The msg/s table, one row per prefetch; the worst grouped ratio and its (case, prefetch)."""
    gc = f"group_concurrency {args.group_concurrency}" if args.group_concurrency else "no group_concurrency"
    print(f"\n{args.consumers} consumers, no-op handler, concurrency 1, {gc} (median msg/s, median of the repeats' ratios; all runs in brackets)")
    print(f"{'prefetch':>8} | {'baseline':>9} | {'groups':>9} | {'one group':>9} | {'groups/base':>11} | "
          f"{'one/base':>8} | target groups/base")
    worst: tuple[float, Run] = (float("inf"), ("groups", args.prefetch[0]))
    for p in args.prefetch:
        b, g, o = (common.median(rates[(case, p)]) for case in CASES)
        gb, ob = (paired(rates, case, p) for case in ("groups", "one group"))
        worst = min(worst, (common.median(gb), ("groups", p)), (common.median(ob), ("one group", p)))
        verdict = "OK" if common.median(gb) >= TARGET else "MISSED"
        print(f"{p:>8} | {b:9,.0f} | {g:9,.0f} | {o:9,.0f} | {common.median(gb):11.2f} | {common.median(ob):8.2f} | "
              f">= {TARGET:.2f}: {verdict}   [baseline {runs(rates, ('baseline', p))}; groups {runs(rates, ('groups', p))}; "
              f"one group {runs(rates, ('one group', p))}; groups/base by repeat {', '.join(f'{r:.2f}' for r in gb)}]")
    return worst


def paired(rates: dict[Run, list[float]], case: str, prefetch: int) -> list[float]:
    """``case``'s msg/s over the baseline's, repeat by repeat: a repeat's runs are side by side in time
    (ABBA), so a machine whose speed drifts between repeats moves both."""
    return [c / b for c, b in zip(rates[(case, prefetch)], rates[("baseline", prefetch)])]


def print_costs(bench: Bench) -> None:
    print("\nWhere the time goes, last run of each case: redis-server CPU (INFO cpu, user + sys) per message and"
          "\n  its share of the run's wall time; the consumers' CPU per message (both consumers, their startup"
          "\n  included); EVALSHA calls per message and Redis's µs in them per message (INFO commandstats),"
          "\n  split into the commands the scripts ran and the rest (Lua itself: loading the includes' functions,"
          "\n  parsing heads, building keys)")
    print(f"{'case':>14} | {'redis µs/msg':>12} | {'redis busy':>10} | {'consumers µs/msg':>16} | "
          f"{'evalsha/msg':>11} | {'script µs/msg':>13} | {'in commands':>11} | {'Lua':>5}")
    for (case, p), cost in sorted(bench.costs.items(), key=lambda kv: kv[0][1]):
        redis_us, busy, cons_us, evals, script_us, inner_us = cost
        print(f"{case + ' p' + str(p):>14} | {redis_us:12.1f} | {busy:10.0%} | {cons_us:16.1f} | {evals:11.3f} | "
              f"{script_us:13.1f} | {inner_us:11.1f} | {script_us - inner_us:5.1f}")


def profile_run(bench: Bench, args: argparse.Namespace, data_dir: str, run: Run) -> None:
    """cProfile one consumer of ``run`` (case, prefetch) over one more run, and print it."""
    path = os.path.join(data_dir, "consumer.prof")
    case, prefetch = run
    rate = bench.consume_run(case, prefetch, 1, profile_path=path)
    print(f"\ncProfile of one smqsup consumer ({case}, prefetch {prefetch}, 1 consumer, "
          f"{rate:,.0f} msg/s under the profiler)")
    print(profile_report(path, args.profile_top))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=10_000, help="groups (publish_many calls) per run")
    parser.add_argument("--per-group", type=int, default=10, help="messages per group (per publish_many)")
    parser.add_argument("--consumers", type=int, default=2, help="consumer processes (default 2)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per case (median; default 2)")
    parser.add_argument("--prefetch", type=int, nargs="+", default=[1],
                        help=f"smqsup prefetch (frames per take, 1-{PREFETCH_MAX}), each a row (default 1)")
    parser.add_argument("--group-concurrency", type=int, default=0,
                        help="queue option group_concurrency of the grouped cases (default 0: none)")
    parser.add_argument("--poll-ms", type=float, default=2.0, help="LLEN polling interval")
    parser.add_argument("--stall-s", type=float, default=30.0,
                        help="a run in which no message is taken this long fails (default 30)")
    parser.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                        help=f"cProfile one grouped consumer, at the worst grouped ratio (auto: below {TARGET})")
    parser.add_argument("--profile-top", type=int, default=25)
    args = parser.parse_args()
    if any(not 1 <= p <= PREFETCH_MAX for p in args.prefetch):
        parser.error(f"--prefetch takes values from 1 to {PREFETCH_MAX}")
    if args.groups < 1 or args.per_group < 1 or args.consumers < 1 or args.repeats < 1:
        parser.error("--groups, --per-group, --consumers and --repeats take values from 1")
    if args.group_concurrency < 0:
        parser.error("--group-concurrency takes 0 (none) or more")
    return args


def main() -> int:
    args = parse_args()
    print(f"smqsup groups benchmark: {common.machine()}")
    with common.bench_server() as server:
        bench = Bench(server.url, args)
        try:
            with common.interruptible("consumers and redis-server"):
                version = bench.client.info("server")["redis_version"]
                print(f"redis-server {version}, {common.transport(server)}, appendfsync everysec; {bench.n:,} messages "
                      f"per run ({args.groups:,} groups x {args.per_group}), median of {args.repeats}\n")
                rates = run_cases(bench, args)
                worst = print_rates(rates, args)
                print_costs(bench)
                print_commands(bench.cmds)
                if args.profile == "always" or (args.profile == "auto" and worst[0] < TARGET):
                    profile_run(bench, args, str(server.data_dir), worst[1])
        finally:
            bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
