"""Latency publish -> handler start of smqsup, side by side with a raw redis-py loop
(DESIGN section 7: p50 <= 0.3 ms, p99 <= 1 ms at a steady 500 msg/s, 2 consumers).

    python tests/bench/latency.py [--messages 5000] [--rate 500] [--consumers 2] [--rounds 2] [--prefetch 1]

The parent publishes at a steady rate, the n-th message at t0 + n/rate
(perf_counter, no drift), each with one single call:

- smqsup: ``Producer.publish(queue, {"t": time.time_ns()})``; the handler, run
  by ``Consumer`` in each of the forked consumer processes, records
  ``time.time_ns() - body["t"]`` first thing.
- raw:    ``LPUSH pending json.dumps({"t": time.time_ns()})``; each consumer
  process loops ``BLMOVE pending proc RIGHT LEFT 1``, ``json.loads``, records
  the same difference, then ``LREM proc 1 frame``.

Both clocks are the wall clock of the same host. The timestamp is taken just
before the publish call, so encoding and the publish round trip count as
latency. A short warm-up at the same rate precedes each measured phase and
is not counted. Each implementation gets ``--messages`` messages, split over
``--rounds`` phases run in ABBA order (smqsup, raw, raw, smqsup, ...) so that
drift of the machine hits both alike. Consumers write their samples to a file in the temp dir at
the end. A private redis-server (unix socket, or TCP loopback with
SMQSUP_BENCH_TCP=1; appendfsync everysec) is started and stopped by this
script; Ctrl-C stops everything it started.

``--prefetch N``: the smqsup consumers' queue option ``prefetch`` (frames
taken in one round trip; the raw loop always takes one). The table gives p50,
p90, p99 and max of both; the last line compares the p99s: "OK" when smqsup's
at that prefetch is no higher than the raw loop's in the same run, "WORSE"
otherwise (taking frames ahead must not make a message wait longer to start).
With more than one round, the p99 ratio of each round's two phases (run back
to back) is printed too, its median and spread: on a noisy machine many short
rounds (``--rounds 16``) say more than a few long ones.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.config import model  # noqa: E402

#: The largest prefetch (1 on a commit before prefetch: these scripts run there too, for ABBA).
PREFETCH_MAX: int = getattr(model, "PREFETCH_MAX", 1)
from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
TARGET_P50_MS = 0.3
TARGET_P99_MS = 1.0


def _write_samples(out_dir: str, kind: str, samples: list[int]) -> None:
    path = os.path.join(out_dir, f"{kind}-{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(samples, f)
    os.replace(path + ".tmp", path)


# --- consumer processes (run in forked children) --------------------------------------


def smq_worker(url: str, queue: str, out_dir: str, prefetch: int) -> None:
    """The smqsup consumer at this prefetch until SIGTERM; then its samples (ns) to ``out_dir``."""
    samples: list[int] = []
    append = samples.append

    def handler(message: Any) -> None:
        now = time.time_ns()
        body = message.body
        if not body.get("w"):
            append(now - body["t"])

    common.run_consumer(url, queue, handler, prefetch=prefetch)
    _write_samples(out_dir, "smqsup", samples)


def raw_worker(url: str, queue: str, out_dir: str) -> None:
    """The raw loop (BLMOVE, the sample, LREM) until SIGTERM; then its samples (ns) to ``out_dir``."""
    state = {"stop": False}
    common.child_signals(lambda: state.__setitem__("stop", True))
    keys = QueueKeys(NS, queue)
    cid = f"raw-{os.getpid()}"
    pending, proc = keys.pending, keys.processing(cid)
    r = redis.Redis.from_url(url)
    r.hset(keys.consumers, cid, "{}")
    samples: list[int] = []
    while not state["stop"]:
        frame = r.blmove(pending, proc, 1, "RIGHT", "LEFT")
        if frame is None:
            continue
        now = time.time_ns()
        body = json.loads(frame)
        if not body.get("w"):
            samples.append(now - body["t"])
        r.lrem(proc, 1, frame)
    r.hdel(keys.consumers, cid)
    r.close()
    _write_samples(out_dir, "raw", samples)


WORKERS: dict[str, Callable[..., None]] = {"smqsup": smq_worker, "raw": raw_worker}


# --- one measured phase -------------------------------------------------------------


def run_phase(kind: str, url: str, client: "redis.Redis[bytes]", args: argparse.Namespace, phase: int,
              out_root: Path, per_phase: int) -> list[int]:
    """Start the consumers, publish ``per_phase`` messages at the steady rate,
    drain, stop; return the samples (ns)."""
    queue = f"lat{phase}"
    keys = QueueKeys(NS, queue)
    out_dir = out_root / f"{kind}-{phase}"
    out_dir.mkdir()
    children = common.Children()
    producer = Producer(url, NS)
    raw = redis.Redis.from_url(url)
    if kind == "smqsup":
        def send(body: dict[str, Any]) -> None:
            body["t"] = time.time_ns()
            producer.publish(queue, body)
    else:
        def send(body: dict[str, Any]) -> None:
            body["t"] = time.time_ns()
            raw.lpush(keys.pending, json.dumps(body))
    worker_args = (url, queue, str(out_dir)) + ((args.prefetch,) if kind == "smqsup" else ())
    try:
        for _ in range(args.consumers):
            children.start(WORKERS[kind], *worker_args)
        common.wait_ready(client, keys.consumers, args.consumers, children=children)
        publish_steady(send, kind, args, per_phase)
        wait_drained(client, keys)
    finally:
        children.stop(client)
        producer.close()
        raw.close()
    samples: list[int] = []
    for path in sorted(out_dir.glob("*.json")):
        samples.extend(json.loads(path.read_text()))
    if len(samples) != per_phase:
        print(f"  WARNING: {kind}: {len(samples)} samples for {per_phase} messages", flush=True)
    return samples


def publish_steady(send: Callable[[dict[str, Any]], None], kind: str, args: argparse.Namespace,
                   per_phase: int) -> None:
    """``--warmup`` uncounted messages, then ``per_phase`` counted ones, the
    n-th due at t0 + n / ``--rate`` (no drift); say how many went out late."""
    interval = 1.0 / args.rate
    t0 = time.perf_counter() + 0.01
    for n in range(args.warmup):
        common.sleep_until(t0 + n * interval)
        send({"w": 1})
    t0 += args.warmup * interval
    late = 0
    for n in range(per_phase):
        due = t0 + n * interval
        common.sleep_until(due)
        if time.perf_counter() - due > interval:
            late += 1
        send({"n": n})
    if late:
        print(f"  note: {kind}: {late} sends were more than one interval late (publisher oversleeps)", flush=True)


def wait_drained(client: "redis.Redis[bytes]", keys: QueueKeys, timeout_s: float = 30.0) -> None:
    """Until the pending list and every consumer's list are empty (or ``timeout_s``: the samples then say so)."""
    deadline = time.monotonic() + timeout_s
    lists = [keys.processing(cid.decode()) for cid in client.hkeys(keys.consumers)]
    while time.monotonic() < deadline:
        pipe = client.pipeline(transaction=False)
        for name in (keys.pending, *lists):
            pipe.llen(name)
        if not sum(pipe.execute()):
            return
        time.sleep(0.01)


def summary(samples_ns: list[int]) -> dict[str, float]:
    ms = sorted(s / 1e6 for s in samples_ns)
    return {"p50": common.percentile(ms, 50), "p90": common.percentile(ms, 90),
            "p99": common.percentile(ms, 99), "max": ms[-1] if ms else float("nan"), "n": len(ms)}


# --- main ---------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5_000,
                        help="messages measured per implementation (split over the rounds)")
    parser.add_argument("--rate", type=float, default=500.0, help="messages per second")
    parser.add_argument("--consumers", type=int, default=2, help="consumer processes")
    parser.add_argument("--warmup", type=int, default=100, help="uncounted messages before each phase")
    parser.add_argument("--rounds", type=int, default=2,
                        help="phases per implementation, ABBA order, samples pooled")
    parser.add_argument("--prefetch", type=int, default=1,
                        help=f"the smqsup consumers' prefetch (frames per take, 1-{PREFETCH_MAX}; default 1)")
    args = parser.parse_args()
    if not 1 <= args.prefetch <= PREFETCH_MAX:
        parser.error(f"--prefetch takes a value from 1 to {PREFETCH_MAX}")
    return args


def run_phases(url: str, client: "redis.Redis[bytes]", args: argparse.Namespace,
               out_root: Path) -> dict[str, list[int]]:
    """Every phase, ``--rounds`` per implementation in ABBA order; the pooled samples (ns) of each."""
    samples: dict[str, list[int]] = {"smqsup": [], "raw": []}
    per_phase = [args.messages // args.rounds + (1 if r < args.messages % args.rounds else 0)
                 for r in range(args.rounds)]
    phase = 0
    ratios: list[float] = []
    for rnd in range(args.rounds):
        p99: dict[str, float] = {}
        for kind in (("smqsup", "raw") if rnd % 2 == 0 else ("raw", "smqsup")):
            phase += 1
            got = run_phase(kind, url, client, args, phase, out_root, per_phase[rnd])
            samples[kind].extend(got)
            s = summary(got)
            p99[kind] = s["p99"]
            print(f"  phase {phase}: {kind:6s} p50 {s['p50']:.3f} ms, p99 {s['p99']:.3f} ms, "
                  f"{s['n']} samples", flush=True)
        ratios.append(p99["smqsup"] / p99["raw"])
    if len(ratios) > 1:
        # Each round's two phases ran back to back: their ratio is the least
        # touched by the machine's drift; its spread says how noisy the run was.
        print(f"  p99 smqsup/raw per round: median {common.median(ratios):.2f}, "
              f"from {min(ratios):.2f} to {max(ratios):.2f} ({len(ratios)} rounds)", flush=True)
    return samples


def print_results(samples: dict[str, list[int]], args: argparse.Namespace) -> None:
    """The table (p50, p90, p99, max of both), the targets, and the p99 at this prefetch against raw's."""
    sm, rw = summary(samples["smqsup"]), summary(samples["raw"])
    name = "smqsup" if args.prefetch == 1 else f"smqsup p{args.prefetch}"
    print(f"\nLatency publish -> handler start (ms), {args.rate:g} msg/s, {args.consumers} consumers, "
          f"smqsup prefetch {args.prefetch}")
    print(f"{'':14} | {'p50':>7} | {'p90':>7} | {'p99':>7} | {'max':>7} | samples")
    for row, s in ((name, sm), ("raw redis-py", rw)):
        print(f"{row:14} | {s['p50']:7.3f} | {s['p90']:7.3f} | {s['p99']:7.3f} | {s['max']:7.3f} | {s['n']}")
    print(f"{'target':14} | {TARGET_P50_MS:7.3f} | {'-':>7} | {TARGET_P99_MS:7.3f} | {'-':>7} |")
    print(f"{'smqsup / raw':14} | {sm['p50'] / rw['p50']:7.2f} | {sm['p90'] / rw['p90']:7.2f} | "
          f"{sm['p99'] / rw['p99']:7.2f} | {sm['max'] / rw['max']:7.2f} |")
    ok50, ok99 = sm["p50"] <= TARGET_P50_MS, sm["p99"] <= TARGET_P99_MS
    print(f"\nsmqsup p50 {sm['p50']:.3f} ms {'meets' if ok50 else 'MISSES'} the target {TARGET_P50_MS} ms; "
          f"p99 {sm['p99']:.3f} ms {'meets' if ok99 else 'MISSES'} the target {TARGET_P99_MS} ms"
          f" (raw loop on this machine: p50 {rw['p50']:.3f}, p99 {rw['p99']:.3f})")
    print(f"p99 at prefetch {args.prefetch} vs raw: {sm['p99']:.3f} ms vs {rw['p99']:.3f} ms: "
          f"{'OK' if sm['p99'] <= rw['p99'] else 'WORSE'}")


def main() -> int:
    args = parse_args()
    print(f"smqsup latency benchmark: {common.machine()}")
    with common.bench_server() as server:
        client = redis.Redis.from_url(server.url)
        try:
            with common.interruptible("consumers and redis-server"):
                version = client.info("server")["redis_version"]
                print(f"redis-server {version}, {common.transport(server)}, appendfsync everysec; "
                      f"{args.consumers} consumers (smqsup prefetch {args.prefetch}), {args.rate:g} msg/s, "
                      f"{args.messages} messages each for smqsup and raw, in {args.rounds} phase(s) each (ABBA)\n")
                samples = run_phases(server.url, client, args, server.data_dir.parent)
        finally:
            client.close()
    print_results(samples, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
