"""Dependencies under real supervisors: a fan-in of 100 parents on 3
queues while consumers are SIGKILLed, a consumer that dies between a
parent's ack and telling its children (the collector releases them), a
chain, a failed parent and a child that runs anyway."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from smqsup import MessageFailed
from smqsup.client.producer import Producer
from tests.support import procs
from tests.support.handlers import max_overlap, read_events
from tests.support.procs import NotifySocket

pytestmark = pytest.mark.topologies


def _kill_every(sup: procs.Supervisor, period_s: float, stop: threading.Event) -> list[int]:
    """SIGKILL one consumer of ``sup`` every ``period_s`` until ``stop``; the pids killed."""
    killed: list[int] = []

    def run() -> None:
        while not stop.wait(period_s):
            kids = sup.children()
            if kids:
                victim = kids[len(killed) % len(kids)].pid
                try:
                    os.kill(victim, signal.SIGKILL)
                    killed.append(victim)
                except ProcessLookupError:
                    pass
    threading.Thread(target=run, daemon=True).start()
    return killed


def test_a_fan_in_of_100_parents_runs_its_child_once_after_the_last_while_consumers_die(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """100 parents on 3 queues, consumers SIGKILLed every 200 ms while they run: the child runs exactly once,
    after the last parent's ack, with all 100 results."""
    queue = {"handler": "tests.support.handlers:family", "consumers": 2, "result_ttl": "5m", "retry_threshold": 50}
    sup = supervise({"x": queue, "y": queue, "z": queue, "c": {**queue, "consumers": 1}}, notify,
                    heartbeat_interval="0.5s", heartbeat_timeout="2s")
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        stop = threading.Event()
        killed = _kill_every(sup, 0.2, stop)
        parents = [(q, p.publish(q, {"i": i, "sleep": 0.05}, result_ttl=300)) for i in range(100) for q in ["xyz"[i % 3]]]
        child = p.publish("c", "fan-in", depends_on=parents, result_ttl=300)
        for q, mid in parents:
            p.result(q, mid, timeout=60)
        stop.set()
        assert p.result("c", child, timeout=30) == "fan-in"
    assert len(killed) >= 3
    events = read_events(str(out_dir))
    runs = [e for e in events if e["id"] == child]
    assert len(runs) == 1
    ends = {e["id"]: e["t"] for e in events if e["id"] != child}
    assert set(ends) == {mid for _, mid in parents}
    assert runs[0]["t"] > max(ends.values())
    assert runs[0]["parents"] == sorted([q, mid, (int(i) * 10)] for (q, mid), i in
                                        zip(parents, range(100)))


def test_a_consumer_dying_between_the_ack_and_the_telling_leaves_it_to_the_collector(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """The parent's consumer exits right after the ack, before it tells the children: the elected collector
    releases them (both children, on two queues), each runs once."""
    supervise({"a": {"handler": "tests.support.die_before_telling:handle", "consumers": 1, "result_ttl": "5m"},
               "b": {"handler": "tests.support.handlers:family", "consumers": 1},
               "c": {"handler": "tests.support.handlers:family", "consumers": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        parent = p.publish("a", {"i": 4}, result_ttl=300, delay=0.5)
        kids = [p.publish(q, f"child-{q}", depends_on=[("a", parent)], result_ttl=300) for q in "bc"]
        assert [p.result(q, mid, timeout=20) for q, mid in zip("bc", kids)] == ["child-b", "child-c"]
    events = read_events(str(out_dir))
    assert [e["parents"] for e in events if e["id"] in kids] == [[["a", parent, 40]]] * 2
    assert len([e for e in events if e["id"] == parent]) == 1


def test_a_chain_a_failed_parent_and_a_child_that_runs_anyway_under_a_supervisor(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """Consumer processes: a chain of 5 steps on 2 queues passes results along; a parent that fails for good
    dead-letters its waiting child with the reason, and its other child, published with on_parent_failure="run",
    runs with the failure said."""
    queue = {"handler": "tests.support.handlers:step", "consumers": 2, "result_ttl": "5m"}
    supervise({"a": queue, "b": queue}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        ids = p.chain([("a", 1), ("b", 10), ("a", 100), ("b", 1000), ("a", 10000)])
        assert p.result("a", ids[-1], timeout=20) == 11111
        bad = p.publish("a", -1, result_ttl=300, delay=0.3)
        doomed = p.publish("b", 5, depends_on=[("a", bad)])
        anyway = p.publish("b", 7, depends_on=[("a", bad)], on_parent_failure="run")
        with pytest.raises(MessageFailed) as failed:
            p.result("b", doomed, timeout=20)
        assert failed.value.reason.startswith(f"dependency failed: a/{bad} (rejected")
        assert p.result("b", anyway, timeout=20) == 7
    events = {e["id"]: e for e in read_events(str(out_dir))}
    assert events[anyway]["failed"] == [f"a/{bad}"] and doomed not in events
    assert [events[mid]["t"] for mid in ids] == sorted(events[mid]["t"] for mid in ids)


def test_grouped_children_released_by_the_collector_keep_their_group_under_a_supervisor(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """Four children of group g wait for a parent whose consumer exits right after the ack: the collector
    releases them into g, and with group_concurrency 1 on 2 consumers of 2 threads no two of them overlap."""
    supervise({"a": {"handler": "tests.support.die_before_telling:handle", "consumers": 1, "result_ttl": "5m"},
               "b": {"handler": "tests.support.handlers:pause_thread", "consumers": 2, "concurrency": 2,
                     "group_concurrency": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        parent = p.publish("a", {"i": 1}, result_ttl=300, delay=0.5)
        kids = [p.publish("b", {"sleep": 0.2, "n": n}, group="g", depends_on=[("a", parent)], result_ttl=300)
                for n in range(4)]
        for mid in kids:
            p.result("b", mid, timeout=30)
    events = [e for e in read_events(str(out_dir)) if e["id"] in kids]
    assert len([e for e in events if e["event"] == "start"]) == 4
    assert max_overlap(events) == 1
