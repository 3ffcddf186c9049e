"""The handlers and consumer processes of tests/bench/throughput.py (not a test module).

Handlers (``--handler``), each made in the consumer process after the fork,
on a redis-py client of its own to the bench's server:

- ``noop``:   does nothing.
- ``incr``:   one Redis call, INCR of ``COUNTER_KEY``.
- ``incr2``:  two calls, INCR of ``COUNTER_KEY`` then RPUSH to ``LOG_KEY``,
              two round trips (no pipeline).
- ``redis2``: the same two calls pipelined, one round trip.

Every handler but noop INCRs ``COUNTER_KEY`` once per message; incr2 and
redis2 RPUSH to ``LOG_KEY`` once per message. The parent checks both after
each run and deletes them.

Consumer kinds (``WORKERS``): "smqsup" and "prio" run ``Consumer`` through
``common.run_consumer``; "raw" and "bare" run the hand-written loop
(BLMOVE, the handler, LREM), "bare" always with the no-op handler (the
parent decides which handler each kind gets). Each puts one tuple
(kind, pid, received, acked, peak RSS bytes) on ``out`` once stopped.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.keys import QueueKeys  # noqa: E402

NS = common.NAMESPACE
#: What the handlers INCR and RPUSH to (the parent checks and deletes them after each run).
COUNTER_KEY, LOG_KEY = f"{NS}:bench:handler:count", f"{NS}:bench:handler:log"
#: The --handler choices, and which of them RPUSH to LOG_KEY.
HANDLERS = ("noop", "incr", "incr2", "redis2")
LOGGING_HANDLERS = ("incr2", "redis2")
#: What each handler does, for the table's title.
DESCRIPTIONS = {
    "noop": "no-op",
    "incr": "incr: one INCR on its own client",
    "incr2": "incr2: INCR then RPUSH on its own client, two round trips",
    "redis2": "redis2: INCR + RPUSH pipelined on its own client, one round trip",
}


def noop(message: Any) -> None:
    """The no-op handler: does nothing."""


def make_handler(name: str, url: str) -> Callable[[Any], None]:
    """The handler ``name`` of this process (one of ``HANDLERS``). Every one
    but noop gets its own redis-py client, made here (call it after the fork);
    that client's pool gives each handler thread a connection of its own."""
    if name == "noop":
        return noop
    client = redis.Redis.from_url(url)

    def incr(message: Any) -> None:
        client.incr(COUNTER_KEY)

    def incr2(message: Any) -> None:
        client.incr(COUNTER_KEY)
        client.rpush(LOG_KEY, b"1")

    def redis2(message: Any) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.incr(COUNTER_KEY)
        pipe.rpush(LOG_KEY, b"1")
        pipe.execute()

    handlers: dict[str, Callable[[Any], None]] = {"incr": incr, "incr2": incr2, "redis2": redis2}
    return handlers[name]


def label(kind: str, concurrency: int, prefetch: int = 1) -> str:
    """A case's name in the runs and tables: the kind, with its concurrency
    and its prefetch when above 1 ("smqsup", "smqsup c4", "smqsup c4 p32")."""
    return " ".join([kind] + ([f"c{concurrency}"] if concurrency != 1 else [])
                    + ([f"p{prefetch}"] if prefetch != 1 else []))


# --- consumer processes (run in forked children) --------------------------------------


def smq_worker(url: str, queue: str, out: Any, profile_path: Optional[str], handler: str, concurrency: int,
               prefetch: int) -> None:
    """The smqsup consumer of ``queue`` at this concurrency and prefetch, until SIGTERM."""
    consumer = common.run_consumer(url, queue, make_handler(handler, url), profile_path, concurrency,
                                   prefetch=prefetch)
    out.put(("smqsup", os.getpid(), consumer.stats.received, consumer.stats.acked, common.peak_rss_bytes()))


def raw_worker(url: str, queue: str, out: Any, profile_path: Optional[str], handler: str, concurrency: int,
               prefetch: int) -> None:
    """BLMOVE, the handler (none for "noop": the plain loop), LREM; one message at a time, on each of
    ``concurrency`` threads (each its own client and list: the most N threads doing this loop get
    through one CPython process, GIL and all). ``profile_path`` and ``prefetch`` are not used: the
    loop takes one frame per round trip."""
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
