"""Cost and footprint of the statistics.

    python tests/bench/stats.py [--messages 20000] [--repeats 3]

1. Throughput of a real ``smqsup -c`` supervisor (2 consumers, no-op handler)
   with ``stats: true`` against the same with ``stats: false``, alternating,
   in one run: counting in the scripts, counters in the heartbeats and the
   collector's once-a-second history point are all on or all off.
2. Redis memory of the history: 10 queues x 600 points (10 minutes at one a
   second), measured with MEMORY USAGE on the series lists.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psutil  # noqa: E402
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.collector import stats  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402
from smqsup.store.broker import Broker  # noqa: E402
from tests.bench._common import bench_server  # noqa: E402
from tests.support import procs  # noqa: E402


def _registered(client: redis.Redis, queue: str, pid: int) -> int:
    kids = {k.pid for k in psutil.Process(pid).children()}
    return sum(1 for c in client.hkeys(QueueKeys("smq", queue).consumers) if int(c.decode().split(":")[1]) in kids)


def _run(url: str, root: Path, run: int, stats_on: bool, n: int) -> float:
    """Messages per second of one supervisor draining ``n`` messages."""
    queue = f"s{run}"
    k, stage = QueueKeys("smq", queue), QueueKeys("smq", f"s{run}stage")
    cfg = procs.write_config(root / f"{queue}.yaml", url,
                             {queue: {"handler": "tests.bench._supervisor_handlers:noop", "consumers": 2}},
                             stats=stats_on)
    client = redis.Redis.from_url(url)
    with open(root / f"{queue}.log", "w") as log:
        sup = subprocess.Popen([sys.executable, "-m", "smqsup", "-c", str(cfg)], env=procs.env(root),
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while _registered(client, queue, sup.pid) < 2:
                if time.monotonic() > deadline:
                    raise TimeoutError("consumers did not start")
                time.sleep(0.02)
            with Producer(url, stats=stats_on) as p:
                p.publish_many(stage.queue, [{"i": i} for i in range(n)])
            t0 = time.perf_counter()
            client.rename(stage.pending, k.pending)
            while True:
                time.sleep(0.002)
                pipe = client.pipeline(transaction=False)
                pipe.llen(k.pending)
                for cid in client.hkeys(k.consumers):
                    pipe.llen(k.processing(cid.decode()))
                if not sum(pipe.execute()):
                    break
            return n / (time.perf_counter() - t0)
        finally:
            os.killpg(sup.pid, signal.SIGTERM)
            sup.wait(30)


def series_memory(url: str, queues: int = 10, points: int = 600) -> int:
    """Bytes of Redis memory the history of ``queues`` queues takes after ``points`` points."""
    broker = Broker(url)
    client = redis.Redis.from_url(url)
    names = [f"mem{i}" for i in range(queues)]
    with Producer(url) as p:
        for name in names:
            p.publish_many(name, range(1000))  # realistic, non-zero counters
    for _ in range(points):
        for name in names:
            stats.sample(broker, name)
    total = sum(int(client.memory_usage(QueueKeys("smq", name).series) or 0) for name in names)
    assert all(client.llen(QueueKeys("smq", name).series) == min(points, stats.SERIES_POINTS) for name in names)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with bench_server() as server, tempfile.TemporaryDirectory(prefix="smqstats-") as tmp:
        on, off = [], []
        run = 0
        for _ in range(args.repeats):
            for flag, bucket in ((True, on), (False, off)):
                run += 1
                rate = _run(server.url, Path(tmp), run, flag, args.messages)
                bucket.append(rate)
                print(f"  run: stats {'on ' if flag else 'off'} {rate:8,.0f} msg/s")
        m_on, m_off = statistics.median(on), statistics.median(off)
        print(f"supervisor, 2 consumers, no-op handler, {args.messages} messages, median of {args.repeats}:")
        print(f"  stats on {m_on:,.0f} msg/s, stats off {m_off:,.0f} msg/s, ratio {m_on / m_off:.3f} "
              f"(target >= 0.97)")
        mem = series_memory(server.url)
        print(f"history memory, 10 queues x 600 points (10 minutes): {mem / 1024:.0f} KiB "
              f"({mem / 6000:.0f} bytes a point)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
