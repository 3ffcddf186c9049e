"""The supervisor's bounds, with the real ``smqsup -c FILE`` and real signals:
what an exit status means once a consumer is ready, and ``max`` as a bound
on the handlers of an autoscaled queue."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.handlers import max_overlap, read_events
from tests.support.helpers import holds, wait_for
from tests.support.procs import NotifySocket

Q = QueueKeys("smq", "q")


def _events(out_dir: Path, event: str) -> list[dict[str, Any]]:
    return [e for e in read_events(str(out_dir)) if e["event"] == event]


def test_exit_status_3_while_handling_a_message_is_an_ordinary_death_not_an_import_failure(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """Exit 3 after ready restarts the consumer at once: the queue keeps its consumers, poison dead-letters."""
    from smqsup.deadletter import DeadLetter

    sup = supervise({"q": {"handler": "tests.support.handlers:exit3", "consumers": 2, "retry_threshold": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        p.publish("q", "poison")
        p.publish("q", "poison")
    wait_for(lambda: redis_client.llen(Q.dead) == 2, timeout_s=30,
             message=f"not both dead-lettered; log:\n{sup.log()}")
    assert sorted(e["attempts"] for e in _events(out_dir, "start")) == [0, 0, 1, 1]
    assert {DeadLetter(raw).reason for raw in redis_client.lrange(Q.dead, 0, -1)} == {"exited with status 3"}
    wait_for(lambda: len(sup.children()) == 2, message=f"consumers not back; log:\n{sup.log()}")
    with Producer(redis_url) as p:
        mid = p.publish("q", "fine")
    wait_for(lambda: [e["id"] for e in _events(out_dir, "done")] == [mid])
    assert "FATAL" not in sup.log() and "cannot be imported" not in sup.log()


def _started_pids(sup: procs.Supervisor) -> set[int]:
    return {e["pid"] for e in sup.events("start")}


def test_ttou_then_ttin_while_every_consumer_is_busy_never_runs_more_than_max_handlers(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str) -> None:
    """{min: 1, max: 3}, all busy, SIGTTOU then SIGTTIN five times: never more than 3 handlers at once."""
    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": {"min": 1, "max": 3},
                           "scale_up_backlog": 1000, "scale_up_lag": "1h", "scale_down_after": "1h"}}, notify)
    notify.wait("READY=1")
    for n in (2, 3):  # one at a time: two signals sent at once may be delivered as one
        sup.signal(signal.SIGTTIN)
        wait_for(lambda n=n: f"SIGTTIN: queue q scaled to {n}" in sup.log())
    wait_for(lambda: len(sup.children()) == 3, message=f"not 3 consumers; log:\n{sup.log()}")
    with Producer(redis_url) as p:
        p.publish_many("q", [{"sleep": 1.5, "n": n} for n in range(40)])
    wait_for(lambda: len(_started_pids(sup)) == 3, message="not every consumer busy")
    for n in range(1, 6):
        before = _started_pids(sup)
        sup.signal(signal.SIGTTOU)
        wait_for(lambda n=n: sup.log().count("SIGTTOU: queue q scaled to 2") == n)
        sup.signal(signal.SIGTTIN)
        wait_for(lambda n=n: sup.log().count("SIGTTIN: queue q scaled to 3") == n + 1)
        # The consumer that replaces the stopped one has taken a message: all are busy again.
        wait_for(lambda before=before: _started_pids(sup) - before, timeout_s=15,
                 message=f"round {n}: no new consumer took a message; log:\n{sup.log()}")
        assert max_overlap(sup.events()) <= 3, f"round {n}: {max_overlap(sup.events())} handlers at once"
    wait_for(lambda: len(sup.children()) == 3)
    assert max_overlap(sup.events()) <= 3


def test_a_paused_groups_backlog_and_garbage_in_the_groups_keys_do_not_scale_a_queue_up(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """{min: 1, max: 4}: 100 messages of a paused group and 100 garbage members of groups:ready keep 1 consumer;
    resumed, the group's messages scale it up."""
    from smqsup.store.broker import Broker

    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": {"min": 1, "max": 4}}}, notify)
    notify.wait("READY=1")
    broker = Broker(redis_url, "smq")
    try:
        broker.groups.pause("q", "held", "test")
        with Producer(redis_url) as p:
            p.publish_many("q", [{"sleep": 0.05, "n": n} for n in range(100)], group="held")
        redis_client.zadd(Q.groups[0], {f"garbage {n}": 0 for n in range(100)})
        holds(lambda: len(sup.children()) == 1, 4.0, message=f"scaled up; log:\n{sup.log()}")
        assert "scaled up" not in sup.log()
        broker.groups.resume("q", "held")
    finally:
        broker.close()
    wait_for(lambda: "scaled up" in sup.log(), timeout_s=15)
