"""Changing a running supervisor with signals: SIGTTIN and SIGTTOU add and
remove a consumer in every queue; SIGHUP rolls the consumers of a changed
queue one at a time, starts an added queue and drains a removed one."""

from __future__ import annotations

import collections
import signal
from collections.abc import Callable
from typing import Any

import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

Supervise = Callable[..., procs.Supervisor]


def _counts(by_queue: dict[str, set[int]]) -> dict[str, int]:
    return {q: len(pids) for q, pids in by_queue.items()}


def _wait_queues(sup: procs.Supervisor, counts: dict[str, int]) -> dict[str, set[int]]:
    """Wait until the live consumers per queue are exactly ``counts``; return their pids."""
    def match() -> dict[str, set[int]] | None:
        now = sup.consumers_by_queue()
        return now if _counts(now) == counts else None

    return wait_for(match, timeout_s=10, interval_s=0.02, message=f"never {counts}: {sup.consumers_by_queue()}")


def test_sigttin_adds_a_consumer_per_queue_and_sigttou_removes_one_never_below_1(
        supervise: Supervise, notify: NotifySocket) -> None:
    """SIGTTIN: one more consumer in every queue; SIGTTOU: one fewer, not below 1; the first consumers survive."""
    sup = supervise({"a": {"handler": "tests.support.handlers:record", "consumers": 2},
                     "b": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    first = _wait_queues(sup, {"a": 2, "b": 1})

    sup.signal(signal.SIGTTIN)
    notify.wait("STATUS=consumers ready: a 3/3, b 2/2")
    grown = _wait_queues(sup, {"a": 3, "b": 2})
    assert first["a"] < grown["a"] and first["b"] < grown["b"]

    sup.signal(signal.SIGTTOU)
    notify.wait("STATUS=consumers ready: a 2/2, b 1/1")
    # The newest go first: exactly the first consumers are left.
    assert _wait_queues(sup, {"a": 2, "b": 1}) == first

    sup.signal(signal.SIGTTOU)
    notify.wait("STATUS=consumers ready: a 1/1, b 1/1")
    last = _wait_queues(sup, {"a": 1, "b": 1})
    assert last["a"] < first["a"] and last["b"] == first["b"]

    wait_for(lambda: sup.log().count("stopped (scale-down)") == 3)
    log = sup.log()
    assert log.count("SIGTTOU: queue a scaled to") == 2
    assert log.count("SIGTTOU: queue b scaled to") == 1  # the second SIGTTOU left b at 1
    assert "died" not in log and "killed" not in log


def test_sighup_with_a_new_handler_rolls_one_child_at_a_time_and_loses_nothing(
        supervise: Supervise, notify: NotifySocket, redis_url: str,
        redis_client: redis.Redis) -> None:
    """A changed handler rolls 3 busy consumers one by one under a trickle: <= 4 processes, each message once."""
    n = 3
    queues: dict[str, dict[str, Any]] = {"q": {"handler": "tests.support.handlers:slow", "consumers": n}}
    sup = supervise(queues, notify)
    notify.wait("READY=1")
    old = sup.processes()
    assert len(old) == n
    # The old handler sleeps 0.2 s per message, so an old consumer told to stop is mostly mid-message
    # and lingers; the new one acks at once.
    queues["q"]["handler"] = "tests.support.handlers:record"
    procs.write_config(sup.cfg, redis_url, queues)

    published: list[str] = []
    samples: list[set[int]] = []
    with Producer(redis_url) as p:
        def tick() -> set[int]:
            published.append(p.publish("q", {"sleep": 0.2}))
            samples.append(sup.processes())
            return samples[-1]

        wait_for(lambda: len(tick()) and len(sup.events("start")) >= n, interval_s=0.02)
        mark = len(notify.poll())
        sup.signal(signal.SIGHUP)
        reloading = notify.wait("RELOADING=1", mark)

        def rolled() -> bool:
            pids = tick()
            ready = any("READY=1" in d.split("\n") for d in notify.poll()[reloading:])
            return ready and len(pids) == n and not pids & old

        wait_for(rolled, timeout_s=20, interval_s=0.02, message=f"roll not done: {samples[-3:]}")
        for _ in range(10):
            tick()

    wait_for(lambda: len(sup.events("done")) >= len(published), timeout_s=10)
    done = sup.events("done")
    assert collections.Counter(e["id"] for e in done) == collections.Counter(published)  # each exactly once
    assert all(e["attempts"] == 0 for e in done)
    assert max(len(s) for s in samples) <= n + 1, [sorted(s) for s in samples]
    # Old consumers ran the old handler (a "start" event first), new ones the new handler.
    new = set().union(*samples) - old
    started = {e["id"] for e in sup.events("start")}
    assert {e["pid"] for e in done if e["pid"] in old} and {e["pid"] for e in done if e["pid"] in new}
    assert all((e["id"] in started) == (e["pid"] in old) for e in done)
    q = QueueKeys("smq", "q")
    assert redis_client.llen(q.pending) == 0 and redis_client.llen(q.dead) == 0
    assert sup.log().count("stopped (roll)") == n


def test_sighup_starts_an_added_queue_and_drains_a_removed_one(
        supervise: Supervise, notify: NotifySocket, redis_url: str,
        redis_client: redis.Redis) -> None:
    """SIGHUP: a new queue starts; a removed one finishes its in-flight message (acked, attempts 0) and exits."""
    queues: dict[str, dict[str, Any]] = {"gone": {"handler": "tests.support.handlers:slow"},
                                         "keep": {"handler": "tests.support.handlers:record", "consumers": 2}}
    sup = supervise(queues, notify)
    notify.wait("READY=1")
    before = _wait_queues(sup, {"gone": 1, "keep": 2})
    with Producer(redis_url) as p:
        mid = p.publish("gone", {"sleep": 1.5})
    wait_for(lambda: sup.events("start"))

    procs.write_config(sup.cfg, redis_url, {"keep": queues["keep"], "new": {"handler": "tests.support.handlers:record"}})
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    notify.wait("READY=1", notify.wait("RELOADING=1", mark))  # READY only once "gone" has no process left

    assert [(e["id"], e["attempts"]) for e in sup.events("done")] == [(mid, 0)]
    [gone_pid] = before["gone"]
    assert procs.gone(gone_pid)
    after = _wait_queues(sup, {"keep": 2, "new": 1})
    assert after["keep"] == before["keep"]
    gone = QueueKeys("smq", "gone")
    assert redis_client.llen(gone.pending) == 0 and redis_client.llen(gone.dead) == 0
    assert redis_client.hlen(gone.consumers) == 0
    assert not redis_client.keys(gone.processing("*"))
    assert "stopped (queue removed)" in sup.log()

    with Producer(redis_url) as p:
        new_mid = p.publish("new", "hello")
    [handled] = wait_for(lambda: [e for e in sup.events("done") if e["id"] == new_mid])
    assert {handled["pid"]} == after["new"]
