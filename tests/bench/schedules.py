"""Fire lateness of schedules on the real ``smqsup -c FILE``: for each fire,
the time the fire script published the message, by the Redis clock, minus
its slot (the slot is the due time, also by the Redis clock).

    python tests/bench/schedules.py [--seconds 50] [--schedules 3] [--supervisors 2]

Setup: a private redis-server (appendfsync everysec) and ``--supervisors``
supervisors of one file with queue "q" (one consumer, a no-op handler) and
``--schedules`` schedules ``every: 1s`` on it; the elected collector of "q"
fires them all. For ``--seconds`` this script polls each schedule's state
hash every 10 ms (HMGET last_fire_ms fired_at_ms: what schedule_fire.lua
records in the step that publishes), so it sees every fire (they are 1 s
apart). Lateness = fired_at_ms - last_fire_ms. Also checked: every slot of
the run fired once (the ``fires`` counter against the distinct slots seen,
no gap between consecutive slots).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import yaml  # noqa: E402

from smqsup.keys import QueueKeys  # noqa: E402
from tests.bench import _common as common  # noqa: E402
from tests.support import procs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=50.0, help="how long to watch (default 50)")
    parser.add_argument("--schedules", type=int, default=3, help="every-1s schedules on the queue (default 3)")
    parser.add_argument("--supervisors", type=int, default=2, help="supervisors running the file (default 2)")
    args = parser.parse_args(argv)
    keys = QueueKeys("smq", "q")
    names = [f"s{i}" for i in range(args.schedules)]
    print(f"machine: {common.machine()}", flush=True)
    with common.bench_server() as server, tempfile.TemporaryDirectory(prefix="smqbench-") as tmp, \
            contextlib.ExitStack() as stack:
        cfg = Path(tmp) / "queues.yaml"
        cfg.write_text(yaml.safe_dump({"redis": {"url": server.url}, "shutdown_timeout": "5s",
                                       "queues": {"q": {"handler": "tests.bench._supervisor_handlers:noop"}},
                                       "schedules": {n: {"queue": "q", "every": "1s"} for n in names}}))
        for i in range(args.supervisors):
            out = Path(tmp) / f"out{i}"
            out.mkdir()
            sup = procs.Supervisor(cfg, out, name=f"s{i}")
            stack.callback(sup.stop)
        client = common.redis.Redis.from_url(server.url)
        seen: dict[tuple[str, int], int] = {}  # (schedule, slot) -> fired_at, both ms by the Redis clock
        started = time.monotonic()
        while time.monotonic() - started < args.seconds:
            pipe = client.pipeline(transaction=False)
            for n in names:
                pipe.hmget(keys.schedule(n), "last_fire_ms", "fired_at_ms")
            for n, (slot, fired) in zip(names, pipe.execute()):
                if slot is not None and fired is not None:
                    seen.setdefault((n, int(slot)), int(fired))
            time.sleep(0.01)
        fires = {n: int(client.hget(keys.schedule(n), "fires") or 0) for n in names}
    late = sorted(fired - slot for (_, slot), fired in seen.items())
    print(f"{len(late)} fires of {args.schedules} every-1s schedule(s) over {args.seconds:.0f} s, "
          f"{args.supervisors} supervisor(s)")
    if not late:
        print("no fire seen")
        return 1
    print(f"fire lateness (publish by the Redis clock - slot): p50 {common.percentile(late, 50):.0f} ms, "
          f"p99 {common.percentile(late, 99):.0f} ms, max {late[-1]} ms, min {late[0]} ms")
    ok = True
    for n in names:
        slots = sorted(slot for (name, slot) in seen if name == n)
        gaps = [b - a for a, b in zip(slots, slots[1:]) if b - a != 1000]
        if fires[n] != len(slots) or gaps:
            ok = False
            print(f"{n}: {fires[n]} fires counted, {len(slots)} slots seen, gaps {gaps[:5]}")
    print("every slot fired once" if ok else "NOT every slot fired once")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
