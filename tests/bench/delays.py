"""Lateness of scheduled messages on the real ``smqsup -c FILE`` (issue 10: a
message published with a delay is handled within 100 ms of its due time at
p99, at a steady load), beside the plain publish -> handler start latency of
the same run.

    python tests/bench/delays.py [--messages 500] [--max-delay-ms 5000] [--rate 500] [--seed 10]

Setup: a private redis-server and one supervisor (supervisor.py's Supervisor)
serving queue "sched" with 2 consumers; the queue's collector, which makes due
messages ready (promote.lua), runs in that supervisor. The handler
(_supervisor_handlers.stamp) appends ``<time.time_ns()> <id>`` to a file first
thing. Three phases, each a steady producer (the n-th publish at t0 + n/rate,
perf_counter, no drift):

1. baseline: ``--baseline`` plain publishes; latency = handler start minus
   time.time_ns() taken just before publish() (as latency.py measures it).
2. scheduled: ``--messages`` publishes with ``delay`` = a whole number of ms
   drawn uniformly from 0..max-delay-ms (random.Random(seed)).
3. past: ``--past`` publishes with ``at`` = time.time() - 60; latency as in 1.

Steady load: the default rate, 500 msg/s, is the steady load latency.py and
DESIGN's latency figures use; 500 messages at 500 msg/s over the first second
with delays uniform over 0-5 s make the due times arrive at a flat ~100 msg/s
from 1 s to 5 s (ramping up over the first second and down over the last), so
the collector promotes under a steady flow rather than one burst, while new
messages with earlier due times keep arriving during the first second (the
collector's poll, PROMOTE_POLL_S, bounds their lateness). ``--rate 100``
spreads the same messages over 5 s instead (due times triangular over 10 s).
The worst case is a sparse one, e.g. ``--rate 20 --max-delay-ms 50``: the
scheduled set is mostly empty, so the collector looks only every
PROMOTE_POLL_S (100 ms), and a message due before that look waits for it
(lateness about uniform over 0-100 ms minus its delay).

The due time of a message is the score publish_options.lua gives it:
floor(Redis TIME in ms) + delay_ms, where delay_ms is what options.build makes
of the delay (int(delay * 1000): 0.029 s is 28 ms). promote.lua moves a
message only when floor(Redis TIME in ms) >= its score, so no handler may start
before the score: "early" counts the starts before it. On one host Redis TIME
and time.time_ns() read the same clock (CLOCK_REALTIME), so the handler's
stamp and the score compare directly. How the score is known:

- exact: read back right after the publish (ZRANGEBYSCORE over the bracket
  below, matched by id) while the message still waits in the scheduled set;
- bracketed: when it was already promoted by then (short delays): the script
  read TIME between the TIME this script read just before the publish and the
  one just after it, so the score lies in [floor(before) + d, floor(after) + d];
  lateness is taken against the upper end, a lower bound, too low by at most
  the bracket's width (printed).

Also counted, as "early vs asked": a handler start before (Redis TIME just
before the publish, in us) + the delay asked, which is certainly before the
moment the caller asked for (the script ran after that TIME); the flooring of
TIME and the int() of the delay may make that up to ~2 ms early legitimately
by the script's own clock, so it is reported, not asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Optional

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402
import supervisor as supbench  # noqa: E402  (tests/bench/supervisor.py: Supervisor, Notify)

from smqsup import framing  # noqa: E402
from smqsup.client import options  # noqa: E402
from smqsup.client.producer import Producer  # noqa: E402
from smqsup.client.publish_options import PublishOptions  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
QUEUE = "sched"
CONSUMERS = 2
TARGET_P99_MS = 100.0
#: Width of the score window read back after a publish, ms (a publish round trip is far shorter).
READ_BACK_MS = 50


class Scheduled(NamedTuple):
    """One scheduled publish: its id, the delay asked (ns), the Redis TIME just
    before it (ns), the bracket of its score (ms) and the score if read back."""

    mid: str
    asked_ns: int
    before_ns: int
    low_ms: int
    high_ms: int
    score_ms: Optional[int]


def redis_now(client: "redis.Redis[bytes]") -> int:
    """Redis TIME in ns (whole microseconds)."""
    sec, usec = client.time()
    return int(sec) * 1_000_000_000 + int(usec) * 1000


def steady(count: int, rate: float, send: Callable[[int], None]) -> None:
    """Call send(n) for n in range(count), the n-th at t0 + n/rate."""
    interval, late = 1.0 / rate, 0
    t0 = time.perf_counter() + 0.01
    for n in range(count):
        due = t0 + n * interval
        common.sleep_until(due)
        if time.perf_counter() - due > interval:
            late += 1
        send(n)
    if late:
        print(f"  note: {late} of {count} sends were more than one interval late", flush=True)


class Rig:
    """The supervisor this script started, a Redis client and a producer."""

    def __init__(self, url: str, out: Path, sup: supbench.Supervisor) -> None:
        self.client: "redis.Redis[bytes]" = redis.Redis.from_url(url)
        self.producer = Producer(url, NS)
        self.keys = QueueKeys(NS, QUEUE)
        self.out, self.sup = out, sup

    def stamps(self) -> dict[str, int]:
        """message id -> time.time_ns() at its handler's start, so far."""
        try:
            text = (self.out / "stamps").read_text()
        except FileNotFoundError:
            return {}
        found: dict[str, int] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2:
                found.setdefault(parts[1], int(parts[0]))
        return found

    def handled(self, ids: list[str], timeout_s: float) -> dict[str, int]:
        """The stamps of ``ids`` once all are there (or the deadline passed)."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = self.stamps()
            if all(mid in got for mid in ids) or time.monotonic() >= deadline:
                return {mid: got[mid] for mid in ids if mid in got}
            self.sup.check_alive()
            time.sleep(0.05)

    def close(self) -> None:
        self.producer.close()
        self.client.close()


def ready(rig: Rig, timeout_s: float = 20.0) -> None:
    """Both consumers blocked on the empty queue and the collector elected."""
    common.wait_ready(rig.client, rig.keys.consumers, CONSUMERS, timeout_s)
    deadline = time.monotonic() + timeout_s
    while not rig.client.exists(rig.keys.gc_lock):
        if time.monotonic() >= deadline:
            raise RuntimeError(f"no collector for {QUEUE} after {timeout_s} s")
        time.sleep(0.01)


# --- phases ---------------------------------------------------------------------------


def immediate(rig: Rig, count: int, rate: float, **kw: Any) -> list[float]:
    """Publish ``count`` messages (options ``kw``) at ``rate``; latencies publish -> handler start, ms."""
    sent: dict[str, int] = {}

    def send(n: int) -> None:
        opts = {k: (v() if callable(v) else v) for k, v in kw.items()}
        t = time.time_ns()
        sent[rig.producer.publish(QUEUE, {"n": n}, **opts)] = t

    steady(count, rate, send)
    got = rig.handled(list(sent), 30.0)
    if len(got) != count:
        print(f"  WARNING: {len(got)} of {count} handled", flush=True)
    return [(got[mid] - t) / 1e6 for mid, t in sent.items() if mid in got]


def scheduled(rig: Rig, args: argparse.Namespace) -> list[Scheduled]:
    """Publish the delayed messages at the steady rate, noting what is known of each due time."""
    rng = random.Random(args.seed)
    delays_ms = [rng.randint(0, args.max_delay_ms) for _ in range(args.messages)]
    rows: list[Scheduled] = []

    def send(n: int) -> None:
        delay = delays_ms[n] / 1000.0
        d = options.build(PublishOptions(delay=delay), default_dedup_ttl_s=1.0).delay_ms
        before = redis_now(rig.client)
        mid = rig.producer.publish(QUEUE, {"n": n}, delay=delay)
        low = before // 1_000_000 + d
        pipe = rig.client.pipeline(transaction=False)
        pipe.time()
        pipe.zrangebyscore(rig.keys.scheduled, low, low + READ_BACK_MS, withscores=True)
        (sec, usec), found = pipe.execute()
        high = int(sec) * 1000 + int(usec) // 1000 + d
        score = next((int(s) for frame, s in found if framing.peek_id(frame) == mid), None)
        rows.append(Scheduled(mid, delays_ms[n] * 1_000_000, before, low, high, score))

    steady(args.messages, args.rate, send)
    return rows


# --- report ---------------------------------------------------------------------------


def spread(values_ms: list[float]) -> str:
    v = sorted(values_ms)
    if not v:
        return "no samples"
    return (f"{common.percentile(v, 50):8.3f} | {common.percentile(v, 90):8.3f} | {common.percentile(v, 99):8.3f} | "
            f"{v[-1]:8.3f} | {len(v)}")


def report_scheduled(rows: list[Scheduled], got: dict[str, int], args: argparse.Namespace) -> list[float]:
    """Print counts and early starts; return the lateness (ms) of each handled message."""
    exact = [r for r in rows if r.score_ms is not None]
    widest = max((r.high_ms - r.low_ms for r in rows if r.score_ms is None), default=0)
    late, early, maybe, asked = [], 0, 0, []
    for r in rows:
        if r.mid not in got:
            continue
        start = got[r.mid]
        due_ms = r.score_ms if r.score_ms is not None else r.high_ms
        late.append(start / 1e6 - due_ms)
        if start < (r.score_ms if r.score_ms is not None else r.low_ms) * 1_000_000:
            early += 1
        elif r.score_ms is None and start < r.high_ms * 1_000_000:
            maybe += 1
        if start < r.before_ns + r.asked_ns:
            asked.append((r.before_ns + r.asked_ns - start) / 1e6)
    print(f"\nScheduled: {len(rows)} messages, delays 0-{args.max_delay_ms} ms (seed {args.seed}), "
          f"published at {args.rate:g} msg/s; handled {len(got)} of {len(rows)}")
    print(f"  due time exact (read back from the scheduled set) for {len(exact)}; bracketed for "
          f"{len(rows) - len(exact)} (promoted before the read-back; widest bracket {widest} ms, "
          f"their lateness is a lower bound)")
    print(f"  early (handler start before the due time): {early}; possibly early (inside a bracket): {maybe}; "
          f"early vs asked (before Redis TIME at publish + delay asked, to the us): {len(asked)}"
          + (f", by at most {max(asked):.3f} ms" if asked else ""))
    return late


def run(rig: Rig, args: argparse.Namespace) -> None:
    rig.producer.publish(QUEUE, {"warm": 1}, delay=0.001)  # loads publish_options.lua
    immediate(rig, args.warmup, args.rate)
    base = immediate(rig, args.baseline, args.rate)
    print(f"  baseline done ({len(base)} samples)", flush=True)
    rows = scheduled(rig, args)
    got = rig.handled([r.mid for r in rows], args.max_delay_ms / 1000 + 30.0)
    late = report_scheduled(rows, got, args)
    past = immediate(rig, args.past, args.rate, at=lambda: time.time() - 60)
    print(f"\n{'(ms)':44} | {'p50':>8} | {'p90':>8} | {'p99':>8} | {'max':>8} | samples")
    print(f"{'scheduled: lateness, handler start - due':44} | {spread(late)}")
    print(f"{'baseline: plain publish -> handler start':44} | {spread(base)}")
    print(f"{'at = now - 60 s: publish -> handler start':44} | {spread(past)}")
    p99 = common.percentile(sorted(late), 99)
    print(f"\nscheduled lateness p99 {p99:.1f} ms {'meets' if p99 <= TARGET_P99_MS else 'MISSES'} the target "
          f"<= {TARGET_P99_MS:g} ms (baseline p99 {common.percentile(sorted(base), 99):.3f} ms)")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=500, help="scheduled messages (default 500)")
    parser.add_argument("--max-delay-ms", type=int, default=5000, help="delays drawn from 0..this, ms")
    parser.add_argument("--rate", type=float, default=500.0, help="publishes per second, every phase")
    parser.add_argument("--seed", type=int, default=10, help="seed of the delays")
    parser.add_argument("--baseline", type=int, default=500, help="plain publishes timed")
    parser.add_argument("--past", type=int, default=100, help="publishes with at = now - 60 s timed")
    parser.add_argument("--warmup", type=int, default=50, help="uncounted plain publishes first")
    args = parser.parse_args(argv)
    print(f"smqsup scheduled-messages benchmark: {common.machine()}; smqsup from {common.REPO_ROOT}", flush=True)
    with common.bench_server() as server, supbench.workdir() as tmp, contextlib.ExitStack() as stack:
        notify = supbench.Notify(tmp / "notify")
        stack.callback(notify.close)
        with common.interruptible("the supervisor and redis-server"):
            cfg = supbench.write_config(tmp / "sched.yaml", server.url, {QUEUE: {
                "handler": "_supervisor_handlers:stamp", "consumers": CONSUMERS}})
            mark = notify.mark()
            sup = supbench.start(cfg, tmp, notify, stack, QUEUE)
            notify.wait_ready(sup, mark)
            rig = Rig(server.url, tmp / f"{QUEUE}-out", sup)
            stack.callback(rig.close)
            ready(rig)
            print(f"supervisor pid {sup.pid}, {CONSUMERS} consumers of {QUEUE!r}, collector elected\n", flush=True)
            run(rig, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
