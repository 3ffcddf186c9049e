"""Batches and unique-until-done under real supervisors and signals: a batch
of 1,000 while consumers are SIGKILLed and the collector's supervisor dies,
a batch grown by its handlers in consumer processes, a dedup key held
across a SIGKILL and its retry."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Optional

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

pytestmark = pytest.mark.topologies

HB = {"heartbeat_interval": "0.5s", "heartbeat_timeout": "2s"}


def _kill_consumers_of(queue: str, sups: list[procs.Supervisor], period_s: float, stop: threading.Event) -> list[int]:
    """SIGKILL a consumer of ``queue`` (of any of ``sups``) every ``period_s`` until ``stop``; the pids."""
    killed: list[int] = []

    def run() -> None:
        while not stop.wait(period_s):
            kids = [k for s in sups for k in s.children() if f"consumer {queue} #" in " ".join(k.cmdline())]
            if kids:
                try:
                    os.kill(kids[len(killed) % len(kids)].pid, signal.SIGKILL)
                    killed.append(kids[len(killed) % len(kids)].pid)
                except (ProcessLookupError, IndexError):
                    pass
    threading.Thread(target=run, daemon=True).start()
    return killed


def _leader(client: redis.Redis, queue: str) -> Optional[int]:
    token = client.get(QueueKeys("smq", queue).gc_lock)
    return int(token.decode().split(":")[1]) if token else None


@pytest.mark.timeout(120)
def test_a_batch_of_1000_fires_once_while_consumers_and_the_collector_die(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """1,000 messages, consumers SIGKILLed every 200 ms, the supervisor leading the members' queue's collector
    SIGKILLed with its consumers: on_complete is published exactly once, counting 1,000 done."""
    queues = {"w": {"handler": "tests.support.handlers:family", "consumers": 2, "retry_threshold": 50},
              "done": {"handler": "tests.support.handlers:record", "consumers": 1}}
    sups = [supervise(queues, name=f"s{i}", **HB) for i in range(2)]
    for s in sups:
        procs.wait_registered(s, 2, redis_client, queue="w")
    stop = threading.Event()
    killed = _kill_consumers_of("w", sups, 0.2, stop)
    with Producer(redis_url) as p:
        with p.batch(on_complete=("done", "fin")) as batch:
            for start in range(0, 1000, 100):
                batch.publish_many("w", [{"i": i, "sleep": 0.003} for i in range(start, start + 100)])
        leader = wait_for(lambda: _leader(redis_client, "w"), timeout_s=10)
        next(s for s in sups if s.pid == leader).kill_group()
        wait_for(lambda: (st := p.batch_status(batch.id)) is not None and st.fired, timeout_s=90, interval_s=0.2)
        stop.set()
        status = p.batch_status(batch.id)
        assert status is not None and (status.total, status.done, status.failed) == (1000, 1000, 0)
    assert len(killed) >= 5
    fired = wait_for(lambda: [e for s in sups for e in read_events(str(s.out_dir))
                              if isinstance(e["body"], dict) and e["body"].get("batch") == batch.id])
    assert len(fired) == 1 and fired[0]["body"]["done"] == 1000


def test_a_batch_grows_from_its_handlers_in_consumer_processes(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str) -> None:
    """Each of 5 messages adds two more from its handler (another process each time): the callback waits
    for all 15 and fires once."""
    sup = supervise({"w": {"handler": "tests.support.handlers:grow", "consumers": 3},
                     "done": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        with p.batch(on_complete=("done", "fin")) as batch:
            batch.publish_many("w", [1, 2, 3, 4, 5])
        wait_for(lambda: (st := p.batch_status(batch.id)) is not None and st.fired, timeout_s=30)
    bodies = sorted(e["body"] for e in sup.events() if isinstance(e["body"], int))
    assert bodies == sorted([*range(1, 6), *(i * 100 + 100 for i in range(1, 6)), *(i * 100 + 101 for i in range(1, 6))])
    fired = wait_for(lambda: [e for e in sup.events() if isinstance(e["body"], dict)])
    assert len(fired) == 1 and fired[0]["body"]["done"] == 15


def test_a_key_held_until_done_holds_across_a_sigkill_and_its_retry(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str) -> None:
    """The consumer of a message holding its dedup key until done is SIGKILLed mid-message: through the reclaim
    and the second attempt the key still names it; once it is done, the key is free."""
    sup = supervise({"q": {"handler": "tests.support.handlers:answer", "consumers": 1}}, notify, **HB)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"hang": True}, dedup_key="u", dedup_until="done", result_ttl=60)
        [start] = wait_for(lambda: sup.events("start"))
        os.kill(start["pid"], signal.SIGKILL)
        held_at: list[float] = []  # (monotonic, as the handlers' events: one clock for the host)
        while p.publish("q", "copy", dedup_key="u", dedup_until="done") == mid:
            held_at.append(time.monotonic())
        assert p.state("q", mid) == "done", "the key was free before its message was done"
        assert p.result("q", mid, timeout=5)["attempts"] == 1
    # Refused from before the retry started until the message was done: held across the reclaim. (How
    # many publishes fit in that window depends on the machine's load; that there was one does not.)
    [retry] = [e for e in sup.events("start") if e["attempts"] == 1]
    assert held_at and held_at[0] < retry["t"]
