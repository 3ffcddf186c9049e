"""Many messages at once per consumer process: smqsup ``concurrency: N`` against arq (issue 11).

    python tests/bench/concurrency.py [--concurrency 1 10 100] [--messages 600 6000 20000] [--repeats 3]
                                      [--arq-poll-delay 0 0.005]

The handler waits on I/O: ``await asyncio.sleep(0.01)`` (a 10 ms call). Two
consumer processes at each ``--concurrency`` N; ``--repeats`` runs per case,
the kinds' order (smqsup, then arq at each poll_delay) reversed every other
repeat; median reported:

- smqsup: the consumer ``queues.<name>.concurrency: N`` makes
  (``Consumer``: the messages as tasks on its event loop; inline, one after
  another, for 1), forked and timed as
  tests/bench/throughput.py times its consumers (its ``Bench``: the messages
  staged with ``publish_many``, released by one RENAME once both consumers
  block; the clock runs until the pending list and every processing list
  are empty).
- arq (when importable; else "arq not installed: skipped"): two
  ``arq.worker.Worker`` processes, ``max_jobs`` N, the same coroutine as an
  arq job. The jobs are enqueued beforehand with arq's ``enqueue_job`` on a
  staging queue, moved onto the workers' queue by one RENAME once both
  workers have started (``on_startup``; their poll loop follows at once).
  The clock runs from the first job's start (``on_job_start``) to the last
  job done (``after_job_end``: its keys deleted), CLOCK_MONOTONIC across
  processes. Once the queue is empty the workers are sent SIGTERM; each lets
  its last jobs end, reports and exits.
  Settings, printed first. ``poll_delay``: each of ``--arq-poll-delay``
  (default 0 and 5 ms) is a case of its own, and the table takes arq's best
  at each concurrency. arq starts jobs only when it polls, so a freed slot
  waits for the next poll (its default 0.5 s caps concurrency 1 at 2 jobs/s
  per worker); in trial runs here 0 (a busy poll loop) served concurrency 1
  best, 2-20 ms concurrency 10 and 100 (less polling, more CPU for the
  jobs), 50 ms and more capped them again. ``keep_result`` 0 (no result
  written: smqsup keeps none either); ``log_results`` off;
  ``max_connections`` 2**31, redis-py 5's default (arq 0.28 pins redis-py
  < 6; redis-py 8's asyncio pool stops at 100 connections, fewer than 100
  jobs in flight hold at once); the rest arq's defaults (``queue_read_limit``
  5 x max_jobs, at least 100, lets two workers reading the same head of the
  queue both find jobs to start).
  Installing: ``pip install --no-deps arq==0.28.0`` (its pin would
  downgrade the venv's redis-py to 5.x; arq runs on redis-py 8 here).

RSS per process: the peak (getrusage ru_maxrss) of each consumer process,
the larger of the two, the largest over the case's runs. Every process is
forked from this script, which has imported redis-py, smqsup and arq, so
each figure includes those pages.

Targets: smqsup at concurrency 100 at least 50x smqsup at concurrency 1,
and smqsup at least arq's rate at each concurrency (ratio = smqsup / arq).

Message counts (``--messages``, one per ``--concurrency``, or one for all)
are chosen so that a run lasts a few seconds; the ideal rate is 200 msg/s
per unit of concurrency for the two processes (2 x N / 10 ms).

A private redis-server (unix socket, appendfsync everysec) in a temp dir is
started and stopped by this script; Ctrl-C stops everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import throughput  # noqa: E402

#: The handler's I/O call, seconds.
IO_S = 0.01
CONSUMERS = 2
TARGET_SPEEDUP, SPEEDUP_FROM, SPEEDUP_AT = 50.0, 1, 100
MB = 1 << 20
#: arq's connection pool size: redis-py 5's default, the redis-py arq 0.28 pins
#: (< 6); redis-py 8's asyncio pool stops at 100 connections, fewer than the
#: pipelines 100 jobs in flight hold at once.
ARQ_MAX_CONNECTIONS = 2**31
#: arq's poll_delay values timed by default, seconds (its own default is 0.5).
ARQ_POLL_DELAYS_S = [0.0, 0.005]


def arq_settings(url: str) -> Any:
    from arq.connections import RedisSettings

    settings = RedisSettings.from_dsn(url)
    settings.max_connections = ARQ_MAX_CONNECTIONS
    return settings


async def io_10ms(message: Any) -> None:
    """The benchmark handler: one 10 ms I/O call."""
    await asyncio.sleep(IO_S)


async def arq_job(ctx: dict[str, Any], body: Any) -> None:
    """The same work as an arq job (arq passes its context first)."""
    await io_10ms(body)


# --- consumer processes (run in forked children) --------------------------------------


def smq_worker(url: str, queue: str, out: Any, profile_path: Optional[str], concurrency: int) -> None:
    consumer = common.run_consumer(url, queue, io_10ms, profile_path, concurrency)
    out.put(("smqsup", os.getpid(), consumer.stats.received, consumer.stats.acked, common.peak_rss_bytes()))


def arq_worker(url: str, queue_name: str, ready_key: str, out: Any, concurrency: int, poll_delay_s: float) -> None:
    """One arq worker of ``queue_name`` until SIGTERM, which the parent sends
    once every job is done in Redis; reports (kind, pid, jobs complete, jobs
    failed, first job start, last job done, peak RSS)."""
    from arq.worker import Worker

    times: dict[str, float] = {}

    async def on_startup(ctx: dict[str, Any]) -> None:
        await ctx["redis"].hset(ready_key, str(os.getpid()), "1")  # the poll loop starts next

    async def on_job_start(ctx: dict[str, Any]) -> None:
        times.setdefault("first", time.perf_counter())

    async def after_job_end(ctx: dict[str, Any]) -> None:
        times["last"] = time.perf_counter()

    worker = Worker(functions=[arq_job], queue_name=queue_name, redis_settings=arq_settings(url),
                    max_jobs=concurrency, poll_delay=poll_delay_s, keep_result=0, log_results=False,
                    on_startup=on_startup, on_job_start=on_job_start, after_job_end=after_job_end,
                    health_check_key=f"{queue_name}:health")

    async def report_and_exit() -> None:
        # Every job is done in Redis (its queue is empty); a task may still be
        # between its finish_job and its after_job_end: let them all end, then
        # report. We end here rather than by arq's SIGTERM path, which cancels
        # the tasks, and which now and then hangs with the main task
        # "cancelling" in its poll loop, or raises CancelledError from close().
        await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
        out.put(("arq", os.getpid(), worker.jobs_complete, worker.jobs_failed, times.get("first"),
                 times.get("last"), common.peak_rss_bytes()))
        os._exit(0)

    worker.loop.add_signal_handler(signal.SIGTERM, lambda: worker.loop.create_task(report_and_exit()))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    worker.run()


# --- timed runs ------------------------------------------------------------------------


class SmqRuns(throughput.Bench):
    """throughput.py's timed consumer runs, with the async I/O handler at a concurrency."""

    def spawn(self, kind: str, queue: str, out: Any, profile_path: Optional[str], concurrency: int,
              prefetch: int = 1) -> None:
        """(throughput's SmqRuns.spawn; this benchmark's consumers take one frame at a time: ``prefetch`` 1.)"""
        self.children.start(smq_worker, self.url, queue, out, profile_path, concurrency)

    def check_handler(self, kind: str, name: str, n_consumers: int, n: int) -> None:
        pass  # the handler keeps no count: the consumers' acks are checked

    def run(self, concurrency: int, n: int) -> tuple[float, int]:
        """(msg/s, the larger peak RSS of the two processes)."""
        rate = self.consume_run("smqsup", CONSUMERS, concurrency=concurrency, messages=n)
        return rate, max((r[4] for r in self.results), default=0)


class ArqRuns:
    """Timed runs of two arq workers on jobs enqueued beforehand."""

    def __init__(self, url: str, args: argparse.Namespace, children: common.Children) -> None:
        import redis

        self.url = url
        self.args = args
        self.children = children
        self.client = redis.Redis.from_url(url)
        self.run_no = 0

    def run(self, concurrency: int, n: int, poll_delay_s: float) -> tuple[float, int]:
        """(jobs/s from the first start to the last done, the larger peak RSS of the two workers)."""
        self.run_no += 1
        queue = f"arq:bench{self.run_no}"
        stage, ready = f"{queue}:stage", f"{queue}:ready"
        asyncio.run(self.enqueue(stage, n))
        if self.client.zcard(stage) != n:
            raise RuntimeError(f"arq: the staging queue holds {self.client.zcard(stage)} jobs, not {n}")
        out = common.CTX.SimpleQueue()
        try:
            for _ in range(CONSUMERS):
                self.children.start(arq_worker, self.url, queue, ready, out, concurrency, poll_delay_s)
            self.wait_ready(ready)
            self.client.rename(stage, queue)
            self.wait_done(queue, n)
        finally:
            self.children.stop()
        results = []
        while not out.empty():
            results.append(out.get())
        self.client.delete(ready)
        done, failed = sum(r[2] for r in results), sum(r[3] for r in results)
        if len(results) != CONSUMERS or done != n or failed:
            raise RuntimeError(f"arq x{CONSUMERS} c{concurrency}: {len(results)} workers reported "
                               f"{done} jobs complete, {failed} failed, of {n}")
        first = min(r[4] for r in results if r[4] is not None)
        last = max(r[5] for r in results if r[5] is not None)
        return n / (last - first), max(r[6] for r in results)

    async def enqueue(self, stage: str, n: int) -> None:
        from arq.connections import create_pool

        pool = await create_pool(arq_settings(self.url))
        try:
            for start in range(0, n, 100):
                await asyncio.gather(*(pool.enqueue_job("arq_job", {"i": i}, _queue_name=stage)
                                       for i in range(start, min(n, start + 100))))
        finally:
            await pool.aclose()

    def wait_ready(self, ready: str, timeout_s: float = 20.0) -> None:
        """Until both workers have started (their poll loop follows on_startup at once)."""
        deadline = time.monotonic() + timeout_s
        while self.client.hlen(ready) < CONSUMERS:
            if self.children.failed():
                raise RuntimeError(f"an arq worker died during startup: {self.children.failed()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"arq workers not ready after {timeout_s} s")
            time.sleep(0.002)

    def wait_done(self, queue: str, n: int) -> None:
        """Until the queue is empty (a job leaves it once done); a run in
        which no job leaves it for ``--stall-s`` raises."""
        left, moved = n, time.monotonic()
        while left:
            time.sleep(self.args.poll_ms / 1000.0)
            now_left = self.client.zcard(queue)
            if now_left != left:
                left, moved = now_left, time.monotonic()
            elif time.monotonic() - moved > self.args.stall_s:
                raise RuntimeError(f"arq: {left} of {n} jobs still queued, none done for {self.args.stall_s:g} s")

    def close(self) -> None:
        self.client.close()


# --- report -------------------------------------------------------------------------------


#: Rates and peak RSS of every run, by case: ("smqsup", concurrency) or
#: ("arq <poll_delay>", concurrency).
Found = dict[tuple[str, int], list[tuple[float, int]]]


def arq_kind(poll_delay_s: float) -> str:
    return f"arq {poll_delay_s:g}"


def run_cases(smq: SmqRuns, arq: Optional[ArqRuns], args: argparse.Namespace, counts: list[int]) -> Found:
    """Every timed run, ``--repeats`` per case, the kinds' order (smqsup, then
    arq at each poll_delay) reversed every other repeat."""
    kinds = ["smqsup"] + ([arq_kind(d) for d in args.arq_poll_delay] if arq is not None else [])
    delays = {arq_kind(d): d for d in args.arq_poll_delay}
    found: Found = {}
    for c, n in zip(args.concurrency, counts):
        for rep in range(args.repeats):
            for kind in (kinds if rep % 2 == 0 else kinds[::-1]):
                if kind == "smqsup":
                    rate, rss = smq.run(c, n)
                else:
                    assert arq is not None
                    rate, rss = arq.run(c, n, delays[kind])
                found.setdefault((kind, c), []).append((rate, rss))
                print(f"  run: {kind:10s} c{c:<4d} {n:6d} msgs  {rate:9,.0f} msg/s  peak RSS {rss / MB:5.1f} MB",
                      flush=True)
    return found


def print_table(found: Found, args: argparse.Namespace, have_arq: bool) -> None:
    def rate(kind: str, c: int) -> float:
        return common.median([r for r, _ in found[(kind, c)]])

    def rss(kind: str, c: int) -> str:
        return f"{max(m for _, m in found[(kind, c)]) / MB:.1f} MB"

    several = have_arq and len(args.arq_poll_delay) > 1
    print(f"\nHandler await asyncio.sleep({IO_S:g}), {CONSUMERS} consumer processes (median msg/s; all runs in "
          f"brackets;\n  RSS: the larger peak of the {CONSUMERS} processes; ratio = smqsup / arq"
          + ("; arq: its best poll_delay at each concurrency)" if several else ")"))
    print(f"{'concurrency':>11} | {'smqsup msg/s':>12} | {'RSS/process':>11} | {'arq msg/s':>9} | "
          f"{'RSS':>8} | {'ratio':>5} | target")
    for c in args.concurrency:
        s = rate("smqsup", c)
        targets = []
        kinds = ["smqsup"]
        if have_arq:
            best = max((arq_kind(d) for d in args.arq_poll_delay), key=lambda k: rate(k, c))
            kinds += [arq_kind(d) for d in args.arq_poll_delay]
            a = rate(best, c)
            arq_cols = f"{a:9,.0f} | {rss(best, c):>8} | {s / a:5.2f}"
            targets.append(f">= arq {'OK' if s >= a else 'MISSED'}"
                           + (f" (arq's best: poll_delay {best.split()[1]})" if several else ""))
        else:
            arq_cols = f"{'-':>9} | {'-':>8} | {'-':>5}"
            targets.append(">= arq: skipped")
        if c == SPEEDUP_AT and SPEEDUP_FROM in args.concurrency:
            x = s / rate("smqsup", SPEEDUP_FROM)
            targets.append(f">= {TARGET_SPEEDUP:g}x c{SPEEDUP_FROM} ({x:.1f}x) "
                           f"{'OK' if x >= TARGET_SPEEDUP else 'MISSED'}")
        runs = "; ".join(f"{k} {', '.join(f'{r:,.0f}' for r, _ in found[(k, c)])}" for k in kinds)
        print(f"{c:>11} | {s:12,.0f} | {rss('smqsup', c):>11} | {arq_cols} | "
              f"{', '.join(targets) or '-'}   [{runs}]")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 100], help="cases (default 1 10 100)")
    parser.add_argument("--messages", type=int, nargs="+", default=[600, 6000, 20000],
                        help="messages per run: one per --concurrency, or one for all")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case (median)")
    parser.add_argument("--poll-ms", type=float, default=2.0, help="the parent's polling interval")
    parser.add_argument("--stall-s", type=float, default=30.0,
                        help="a run in which no message is done this long fails (default 30)")
    parser.add_argument("--arq-poll-delay", type=float, nargs="+", default=ARQ_POLL_DELAYS_S,
                        help="arq's poll_delay, seconds; with several, each is timed and arq's best counts "
                             f"(default {' '.join(f'{d:g}' for d in ARQ_POLL_DELAYS_S)})")
    parser.add_argument("--no-arq", action="store_true", help="time smqsup only")
    args = parser.parse_args()
    if len(args.messages) not in (1, len(args.concurrency)):
        parser.error("--messages: one count, or one per --concurrency")
    return args


def main() -> int:
    args = parse_args()
    counts = args.messages * len(args.concurrency) if len(args.messages) == 1 else args.messages
    have_arq = not args.no_arq and importlib.util.find_spec("arq") is not None
    print(f"smqsup concurrency benchmark: {common.machine()}")
    if have_arq:
        import arq

        print(f"arq {arq.VERSION}: {CONSUMERS} workers, max_jobs = concurrency, poll_delay "
              f"{' / '.join(f'{d:g}' for d in args.arq_poll_delay)} s, keep_result 0, log_results off, "
              f"max_connections 2**31, queue_read_limit max(5 x max_jobs, 100), other settings default")
    else:
        print("arq " + ("not timed (--no-arq)" if args.no_arq else "not installed: skipped"))
    with common.bench_server() as server:
        smq = SmqRuns(server.url, argparse.Namespace(**{**vars(args), "messages": max(counts)}))
        arq_runs = ArqRuns(server.url, args, smq.children) if have_arq else None
        try:
            with common.interruptible("consumers and redis-server"):
                version = smq.client.info("server")["redis_version"]
                print(f"redis-server {version}, {common.transport(server)}, appendfsync everysec; messages per run "
                      f"{', '.join(f'c{c}: {n}' for c, n in zip(args.concurrency, counts))}; "
                      f"median of {args.repeats}\n")
                found = run_cases(smq, arq_runs, args, counts)
                print_table(found, args, have_arq)
        finally:
            if arq_runs is not None:
                arq_runs.close()
            smq.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
