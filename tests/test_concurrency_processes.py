"""concurrency: N under a real supervisor: many messages in flight per
consumer process, and every guarantee of the sequential consumer kept through
SIGKILL, SIGTERM and message_timeout."""

from __future__ import annotations

import collections
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import redis

from smqsup import deadletter, framing, message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.handlers import max_overlap
from tests.support.helpers import holds, wait_for

K = QueueKeys("smq", "q")


def _events(sup: procs.Supervisor, event: str, attempts: int | None = None) -> list[dict[str, Any]]:
    return [e for e in sup.events(event) if attempts is None or e["attempts"] == attempts]


def test_two_consumers_of_twenty_run_forty_at_once_and_finish_2000_within_twice_the_ideal(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """concurrency 20, an async handler awaiting 200 ms, 2 consumers: 40 in flight at once (recorded by the
    handlers) and 2,000 messages done, each once, within 2x the ideal 10 s."""
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_async", "consumers": 2, "concurrency": 20}})
    wait_for(lambda: redis_client.hlen(K.consumers) == 2)
    began = time.monotonic()
    with Producer(redis_url) as p:
        ids = p.publish_many("q", [{"sleep": 0.2}] * 2000)
    wait_for(lambda: len(sup.events("done")) >= 2000, timeout_s=25, message="2,000 not done within 25 s")
    took = time.monotonic() - began
    done = sup.events("done")
    assert sorted(e["id"] for e in done) == sorted(ids)
    assert max_overlap(sup.events()) == 40
    assert took < 20, f"2,000 messages took {took:.1f} s (ideal 10 s)"
    wait_for(lambda: redis_client.hget(K.counters, "acked") == b"2000")


def test_sigkill_with_twenty_in_flight_returns_all_twenty_each_costing_one_attempt(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """SIGKILL of a consumer running 20: all 20 come back (attempts 1), nothing lost, none run twice more."""
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_async", "concurrency": 20}})
    wait_for(lambda: redis_client.hlen(K.consumers) == 1)
    with Producer(redis_url) as p:
        ids = p.publish_many("q", [{"sleep": 60, "then": 0}] * 20)
    wait_for(lambda: len(sup.events("start")) == 20)
    [victim] = sup.consumers_by_queue()["q"]
    [cid] = [c.decode() for c in redis_client.hkeys(K.consumers)]
    assert redis_client.llen(K.processing(cid)) == 20
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(sup.events("done")) == 20, timeout_s=20)
    done = sup.events("done")
    assert sorted(e["id"] for e in done) == sorted(ids) and {e["attempts"] for e in done} == {1}
    holds(lambda: len(sup.events("start")) == 40 and len(sup.events("done")) == 20, 0.5)
    assert redis_client.llen(K.pending) == 0 and redis_client.llen(K.dead) == 0


def test_sigterm_with_twenty_in_flight_lets_all_twenty_finish(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """A graceful stop takes nothing more and lets every message in flight finish and ack (no attempt)."""
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_async", "concurrency": 20}}, shutdown_timeout="20s")
    wait_for(lambda: redis_client.hlen(K.consumers) == 1)
    with Producer(redis_url) as p:
        ids = p.publish_many("q", [{"sleep": 1.5}] * 25)
    wait_for(lambda: len(sup.events("start")) == 20)
    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(20) == 0
    done = sup.events("done")
    assert len(done) == 20 and {e["attempts"] for e in done} == {0}
    assert sorted(e["id"] for e in done) == sorted(e["id"] for e in sup.events("start"))
    # The five never started wait in pending, free; nothing is held.
    assert redis_client.llen(K.pending) == 5 and redis_client.hget(K.counters, "acked") == b"20"
    assert {message.decode(f).id for f in redis_client.lrange(K.pending, 0, -1)} == set(ids) - {
        e["id"] for e in done}
    assert not [k for k in redis_client.scan_iter(K.processing("*"))]


def test_a_task_past_message_timeout_is_cancelled_while_its_nineteen_siblings_ack(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """message_timeout 1 s: the one task sleeping 60 s is cancelled and costs an attempt (reason "timeout",
    dead-lettered at retry_threshold 0); the 19 others ack; the process is not killed."""
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_async", "concurrency": 20, "message_timeout": "1s",
                           "retry_threshold": 0}})
    wait_for(lambda: redis_client.hlen(K.consumers) == 1)
    [pid] = sup.consumers_by_queue()["q"]
    with Producer(redis_url) as p:
        slow = p.publish("q", {"sleep": 60})
        p.publish_many("q", [{"sleep": 0.3}] * 19)
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=10)
    dead = deadletter.DeadLetter(redis_client.lindex(K.dead, 0) or b"")
    assert dead.reason == "timeout" and dead.message() is not None and dead.message().id == slow  # type: ignore[union-attr]
    done = sup.events("done")
    assert len(done) == 19 and slow not in {e["id"] for e in done}
    assert sup.consumers_by_queue()["q"] == {pid}
    assert redis_client.hget(K.counters, "acked") == b"19"


def test_a_thread_past_message_timeout_is_left_behind_and_its_siblings_go_on(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """A plain handler on 4 threads: the one stuck 60 s costs an attempt at message_timeout; a new thread
    takes its place, so 4 still run at once after it; the process is not killed."""
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_thread", "concurrency": 4, "message_timeout": "1s",
                           "retry_threshold": 0}})
    wait_for(lambda: redis_client.hlen(K.consumers) == 1)
    [pid] = sup.consumers_by_queue()["q"]
    with Producer(redis_url) as p:
        p.publish("q", {"sleep": 60})
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=10)
    with Producer(redis_url) as p:
        p.publish_many("q", [{"sleep": 0.5}] * 8)
    wait_for(lambda: len(sup.events("done")) == 8, timeout_s=10)
    assert max_overlap([e for e in sup.events() if e["body"] != {"sleep": 60}]) == 4
    assert sup.consumers_by_queue()["q"] == {pid}
    per_attempts = collections.Counter(e["attempts"] for e in sup.events("done"))
    assert per_attempts == {0: 8}


def test_messages_still_running_at_shutdown_timeout_go_back_free(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """SIGTERM with 5 tasks that outlast shutdown_timeout: the supervisor kills the consumer at the deadline
    and all 5 go back to pending without costing an attempt."""
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_async", "concurrency": 5}}, shutdown_timeout="1s")
    wait_for(lambda: redis_client.hlen(K.consumers) == 1)
    with Producer(redis_url) as p:
        ids = p.publish_many("q", [{"sleep": 60}] * 5)
    wait_for(lambda: len(sup.events("start")) == 5)
    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(20) == 0
    back = [framing.split_frame(f) for f in redis_client.lrange(K.pending, 0, -1)]
    assert sorted(message.decode(b"%d|%b" % (a, p)).id for a, p in back) == sorted(ids)
    assert {a for a, _ in back} == {0}
    assert not sup.events("done")


def test_a_handler_blocking_the_event_loop_gets_the_process_killed_and_every_message_in_flight_retried(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """A task that blocks the loop (time.sleep) can't be cancelled: past message_timeout plus the grace the
    supervisor kills the process; the blocker and its 3 siblings in flight each cost one attempt."""
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_async", "concurrency": 4, "message_timeout": "1s"}})
    wait_for(lambda: redis_client.hlen(K.consumers) == 1)
    [pid] = sup.consumers_by_queue()["q"]
    with Producer(redis_url) as p:
        ids = p.publish_many("q", [{"sleep": 0.5, "then": 0}] * 3)
        blocker = p.publish("q", {"block": 60})
    wait_for(lambda: len(sup.events("done")) == 4, timeout_s=20)
    done = {e["id"]: e["attempts"] for e in sup.events("done")}
    assert done == {**{i: 1 for i in ids}, blocker: 1}
    assert pid not in sup.consumers_by_queue()["q"]
    assert "message_timeout" in sup.log()


def test_sighup_changing_concurrency_rolls_the_consumers_and_the_new_ones_run_that_many(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, redis_url: str,
        redis_client: redis.Redis) -> None:
    """concurrency 2 -> 6 by SIGHUP: the consumer is replaced, its title and the overlap say 6."""
    queues: dict[str, dict[str, Any]] = {"q": {"handler": "tests.support.handlers:pause_async", "concurrency": 2}}
    sup = supervise(queues, notify)
    notify.wait("READY=1")
    [old] = sup.consumers_by_queue()["q"]
    queues["q"]["concurrency"] = 6
    procs.write_config(sup.cfg, redis_url, queues)
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    notify.wait("RELOADING=1", mark)
    wait_for(lambda: sup.consumers_by_queue()["q"] and old not in sup.consumers_by_queue()["q"], timeout_s=15)
    wait_for(lambda: redis_client.hlen(K.consumers) == 1)
    with Producer(redis_url) as p:
        p.publish_many("q", [{"sleep": 0.5}] * 12)
    wait_for(lambda: len(sup.events("done")) == 12, timeout_s=15)
    assert max_overlap(sup.events()) == 6
    wait_for(lambda: any("[idle 0/6 12 msgs]" in t for t in sup.titles()))
    assert "stopped (roll)" in sup.log()
