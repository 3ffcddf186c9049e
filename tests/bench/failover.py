"""Liveness figures: how long after a whole supervisor group is SIGKILLed its
messages are reclaimed by another supervisor, and how long the collector lock
takes to move when its holder dies, as multiples of heartbeat_timeout.

    python tests/bench/failover.py [--trials 3] [--heartbeat-timeout 2]

Each trial runs two real ``smqsup -c`` supervisors (A, then B) on one private
redis-server, SIGKILLs A's process group while A's consumers hold messages and
A holds the collector lock, and times (a) until every message is back with one
attempt counted and (b) until B holds the lock.
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis  # noqa: E402

from smqsup import message  # noqa: E402
from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402
from tests.bench._common import bench_server  # noqa: E402
from tests.support import procs  # noqa: E402

Q = QueueKeys("smq", "q")


def _start(root: Path, name: str, url: str, timeout_s: float) -> subprocess.Popen[bytes]:
    out = root / name
    out.mkdir()
    cfg = procs.write_config(root / f"{name}.yaml", url, {"q": {"handler": "tests.support.handlers:slow", "consumers": 2}},
                             heartbeat_interval=f"{timeout_s / 10:g}s", heartbeat_timeout=f"{timeout_s:g}s")
    log = open(out / "log.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "smqsup", "-c", str(cfg)], env=procs.env(out), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _wait(cond: Callable[[], bool], timeout_s: float, step: float = 0.005) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout_s:
            raise TimeoutError("condition not met")
        time.sleep(step)
    return time.monotonic() - start


def _consumers_of(client: redis.Redis, pid: int) -> int:
    import psutil

    kids = {k.pid for k in psutil.Process(pid).children()}
    return sum(1 for cid in client.hkeys(Q.consumers) if int(cid.decode().split(":")[1]) in kids)


def _trial(timeout_s: float) -> tuple[float, float]:
    with bench_server() as server, tempfile.TemporaryDirectory(prefix="smqfail-") as tmp:
        client = redis.Redis.from_url(server.url)
        root = Path(tmp)
        a = _start(root, "a", server.url, timeout_s)
        b = None
        try:
            _wait(lambda: _consumers_of(client, a.pid) == 2, 20)
            with Producer(server.url) as p:
                ids = p.publish_many("q", [{"sleep": 60}] * 2)
            _wait(lambda: client.llen(Q.pending) == 0, 10)
            b = _start(root, "b", server.url, timeout_s)
            _wait(lambda: _consumers_of(client, b.pid) == 2, 20)
            assert (client.get(Q.gc_lock) or b"").decode().split(":")[1] == str(a.pid)
            b_pid = b.pid
            os.killpg(a.pid, signal.SIGKILL)
            killed = time.monotonic()

            def back() -> bool:
                frames = list(client.lrange(Q.pending, 0, -1))
                for cid in client.hkeys(Q.consumers):
                    frames += client.lrange(Q.processing(cid.decode()), 0, -1)
                found = {message.decode(f).id for f in frames if f.startswith(b"1|")}
                return set(ids) <= found

            def b_leads() -> bool:
                return (client.get(Q.gc_lock) or b"::").decode().split(":")[1] == str(b_pid)

            lead_s = reclaim_s = 0.0
            deadline = killed + 4 * timeout_s
            while (not lead_s or not reclaim_s) and time.monotonic() < deadline:
                now = time.monotonic() - killed
                if not lead_s and b_leads():
                    lead_s = now
                if not reclaim_s and back():
                    reclaim_s = now
                time.sleep(0.005)
            if not lead_s or not reclaim_s:
                raise TimeoutError(f"not done within {4 * timeout_s:g} s")
            return reclaim_s, lead_s
        finally:
            for proc in (a, b):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(20)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--heartbeat-timeout", type=float, default=2.0, help="seconds (interval = timeout/10)")
    args = parser.parse_args()
    t = args.heartbeat_timeout
    reclaims, leads = [], []
    for n in range(args.trials):
        reclaim_s, lead_s = _trial(t)
        reclaims.append(reclaim_s)
        leads.append(lead_s)
        print(f"trial {n + 1}: messages back after {reclaim_s:.2f} s ({reclaim_s / t:.2f}x heartbeat_timeout), "
              f"B leads after {lead_s:.2f} s ({lead_s / t:.2f}x the lock TTL)")
    print(f"heartbeat_timeout {t:g} s, interval {t / 10:g} s, {args.trials} trials")
    print(f"reclaim after a whole supervisor group is SIGKILLed: median {statistics.median(reclaims):.2f} s = "
          f"{statistics.median(reclaims) / t:.2f}x heartbeat_timeout, max {max(reclaims) / t:.2f}x "
          f"(target <= heartbeat_timeout + 2 s = {(t + 2) / t:.2f}x)")
    print(f"collector failover: median {statistics.median(leads):.2f} s = {statistics.median(leads) / t:.2f}x "
          f"the lock TTL, max {max(leads) / t:.2f}x (target <= 1x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
