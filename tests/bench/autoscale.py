"""Figures of autoscaling and rolls (issue: the supervisor for deploys and load), on the real ``smqsup -c FILE``.

    python tests/bench/autoscale.py [--runs 2] [--idle-s 20]

1. reaction to a burst, ``--runs`` times: a queue with ``consumers: {min: 1,
   max: 8}``, ``scale_down_after: 5s``, a handler of 20 ms; 5,000 messages
   published at once; the seconds from the publish until the supervisor runs
   2, 3, ... 8 consumers (their processes, polled every 20 ms), until the
   queue is drained, and from then until it is back to 1.
2. idle CPU with autoscaling on: 2 queues of ``{min: 8, max: 16}`` (16
   consumers, idle: the supervisor reads their lag every 0.5 s), then the same
   16 consumers as fixed counts (autoscaling off), each ``--idle-s`` seconds
   after 3 s to settle: the supervisor's own user+system CPU time (psutil)
   over the wall time. Target < 2 % of a core.
3. a code roll: 4 consumers, the handler's module rewritten, SIGHUP: the
   seconds until every consumer is a new one.

A private redis-server (a unix socket; TCP loopback with SMQSUP_BENCH_TCP=1)
and each ``smqsup -c`` are started here and stopped on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Optional

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import psutil  # noqa: E402
import redis  # noqa: E402
from supervisor import Notify, start, workdir, write_config  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402

TARGET_IDLE_CPU_PERCENT = 2.0


def _count(sup: "object") -> int:
    return len(sup.consumers())  # type: ignore[attr-defined]


def bench_burst(url: str, tmp: Path, notify: Notify, run: int) -> None:
    cfg = write_config(tmp / f"burst{run}.yaml", url, {"q": {
        "handler": "_supervisor_handlers:sleep20", "consumers": {"min": 1, "max": 8}, "scale_down_after": "5s"}})
    client = redis.Redis.from_url(url)
    with contextlib.ExitStack() as stack:
        mark = notify.mark()
        sup = start(cfg, tmp, notify, stack, f"burst{run}")
        notify.wait_ready(sup, mark)
        reached: dict[int, float] = {}
        with Producer(url, namespace=common.NAMESPACE) as p:
            t0 = time.monotonic()
            p.publish_many("q", [{"n": n} for n in range(5000)])
        keys = QueueKeys(common.NAMESPACE, "q")
        drained = None
        while drained is None or _count(sup) > 1:
            sup.check_alive()
            n = _count(sup)
            reached.setdefault(n, time.monotonic() - t0)
            if drained is None and client.llen(keys.pending) == 0 and all(
                    client.llen(k) == 0 for k in client.scan_iter(f"{common.NAMESPACE}:{{q}}:processing:*")):
                drained = time.monotonic() - t0
            if time.monotonic() - t0 > 120:
                raise RuntimeError(f"no end: {reached}")
            time.sleep(0.02)  # polling a measured process, not a synchronisation
        back = time.monotonic() - t0
        steps = "  ".join(f"{k}:{reached[k]:.1f}s" for k in range(2, 9) if k in reached)
        print(f"  run {run + 1}: reached {steps}; drained at {drained:.1f}s; back to 1 at {back:.1f}s "
              f"({back - (drained or 0):.1f}s after the drain, scale_down_after 5s)", flush=True)


def idle_cpu(url: str, tmp: Path, notify: Notify, name: str, consumers: object, idle_s: float) -> float:
    cfg = write_config(tmp / f"{name}.yaml", url, {f"q{i}": {"handler": "_supervisor_handlers:noop",
                                                             "consumers": consumers} for i in (1, 2)})
    with contextlib.ExitStack() as stack:
        mark = notify.mark()
        sup = start(cfg, tmp, notify, stack, name)
        notify.wait_ready(sup, mark)
        if _count(sup) != 16:
            raise RuntimeError(f"{_count(sup)} consumers, not 16")
        time.sleep(3)  # let it settle
        proc = psutil.Process(sup.pid)
        before, t = proc.cpu_times(), time.monotonic()
        time.sleep(idle_s)  # the measured window
        after, wall = proc.cpu_times(), time.monotonic() - t
        return 100.0 * ((after.user - before.user) + (after.system - before.system)) / wall


def bench_roll(url: str, tmp: Path, notify: Notify) -> None:
    code = tmp / "code"
    code.mkdir(exist_ok=True)
    (code / "bench_rolled.py").write_text("def handle(msg):\n    return None\n")
    sys.path.insert(0, str(code))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])
    cfg = write_config(tmp / "roll.yaml", url, {"q": {"handler": "bench_rolled:handle", "consumers": 4}})
    with contextlib.ExitStack() as stack:
        mark = notify.mark()
        sup = start(cfg, tmp, notify, stack, "roll")
        notify.wait_ready(sup, mark)
        old = {c.pid for c in sup.consumers()}
        (code / "bench_rolled.py").write_text("def handle(msg):\n    return 2\n")
        t0 = time.monotonic()
        os.kill(sup.pid, signal.SIGHUP)
        while True:
            now = {c.pid for c in sup.consumers()}
            if len(now) == 4 and not now & old:
                break
            if time.monotonic() - t0 > 60:
                raise RuntimeError("the roll did not end")
            time.sleep(0.02)  # polling a measured process, not a synchronisation
        print(f"code roll of 4 consumers (SIGHUP to the last new one): {time.monotonic() - t0:.2f}s", flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="bursts (default 2)")
    parser.add_argument("--idle-s", type=float, default=20.0, help="idle CPU window, seconds (default 20)")
    args = parser.parse_args(argv)
    print(f"machine: {common.machine()}", flush=True)
    with common.bench_server() as server, workdir() as tmp:
        print(f"redis: {common.transport(server)}", flush=True)
        notify = Notify(tmp / "notify")
        try:
            print("burst of 5,000 x 20 ms, {min: 1, max: 8}:", flush=True)
            for run in range(args.runs):
                bench_burst(server.url, tmp, notify, run)
            on = idle_cpu(server.url, tmp, notify, "auto", {"min": 8, "max": 16}, args.idle_s)
            off = idle_cpu(server.url, tmp, notify, "fixed", 8, args.idle_s)
            print(f"idle supervisor CPU, 16 consumers: autoscaling on {on:.2f}% of a core, off {off:.2f}% "
                  f"(target < {TARGET_IDLE_CPU_PERCENT}%: {'met' if on < TARGET_IDLE_CPU_PERCENT else 'MISSED'})",
                  flush=True)
            bench_roll(server.url, tmp, notify)
        finally:
            notify.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
