"""A cancel meets every script that settles or moves a message: an ack, a
nack (a failure, a retry), a give-back at a stop, a free reclaim, a promote
of a due retry. Whichever ends a message whose cancel was asked ends it
"cancelled", never runs it again, and the cancel lasts as long as the
message (no clock forgets it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import MessageFailed, deadletter
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.store.core.declared import Declared
from tests.support.helpers import redis_ms, wait_for
from tests.support.inproc import NS, Running

pytestmark = pytest.mark.topologies

K = QueueKeys(NS, "q")


def _dead(client: redis.Redis) -> list[tuple[str, str]]:
    """(id, reason) of each dead letter, oldest first."""
    return [(d.ref, d.reason) for d in (deadletter.DeadLetter(raw) for raw in reversed(client.lrange(K.dead, 0, -1)))]


def _failing_once_told(go: threading.Event, tries: list[Any]) -> Callable[[Any], None]:
    """A handler recording each body it runs; on "x" it waits (at most 20 s) for ``go``, then raises."""
    def handle(m: Any) -> None:
        tries.append(m.body)
        if m.body == "x":
            go.wait(20)
            raise ValueError("failed anyway")
    return handle


@pytest.mark.parametrize("tracked", [True, False])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_handler_that_raises_after_its_cancel_ends_cancelled(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, concurrency: int,
        tracked: bool) -> None:
    """cancel() answers "stopping"; the handler raises before its consumer looks: the nack dead-letters it
    "cancelled" (no retry), and it never runs again."""
    go, tries = threading.Event(), []
    handle = _failing_once_told(go, tries)
    start(handle, concurrency=concurrency, retry_delay_s=0)
    mid = producer.publish("q", "x", result_ttl=60 if tracked else None)
    wait_for(lambda: tries == ["x"])
    assert producer.cancel("q", mid) == "stopping"
    go.set()
    wait_for(lambda: _dead(redis_client) == [(mid, "cancelled")])
    producer.publish("q", "after")
    wait_for(lambda: "after" in tries)
    assert tries.count("x") == 1 and redis_client.zcard(K.cancel) == 0
    assert redis_client.hget(K.counters, "cancelled") == b"1" and redis_client.hget(K.counters, "retried") is None
    if tracked:
        with pytest.raises(MessageFailed) as failed:
            producer.result("q", mid, timeout=0)
        assert failed.value.reason == "cancelled"


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_handler_that_returns_after_its_cancel_ends_cancelled(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, concurrency: int) -> None:
    """A handler (inline, or a thread) returns right after cancel() answered "stopping": its ack
    dead-letters the untracked message "cancelled", not counted acked; the next message is acked as ever."""
    go, ran = threading.Event(), []

    def handle(m: Any) -> None:
        ran.append(m.body)
        if m.body == "x":
            go.wait(20)
    start(handle, concurrency=concurrency)
    mid = producer.publish("q", "x")
    wait_for(lambda: ran == ["x"])
    assert producer.cancel("q", mid) == "stopping"
    go.set()
    wait_for(lambda: _dead(redis_client) == [(mid, "cancelled")])
    producer.publish("q", "y")
    wait_for(lambda: redis_client.hget(K.counters, "acked") == b"1")
    assert ran == ["x", "y"] and redis_client.zcard(K.cancel) == 0


def test_a_cancelled_prefetched_message_given_back_at_a_stop_never_runs(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Prefetch 4 behind a long message; one prefetched is cancelled ("stopping") and its consumer stops
    before it looks: the give-back dead-letters it "cancelled" (attempts 0), the other goes back and runs."""
    gate, ran = threading.Event(), []

    def handle(m: Any) -> None:
        ran.append(m.body)
        if m.body == 0:
            gate.wait(20)
    ids = producer.publish_many("q", [0, 1, 2], result_ttl=60)
    run = start(handle, prefetch=4)
    wait_for(lambda: ran == [0] and producer.state("q", ids[2]) == "active")
    assert producer.cancel("q", ids[2]) == "stopping"
    run.request_stop()
    gate.set()
    run.join()
    assert producer.state("q", ids[2]) == "cancelled" and producer.state("q", ids[1]) == "waiting"
    start(handle)
    assert producer.result("q", ids[1], timeout=10) is None
    assert ran == [0, 1, 0] or ran == [0, 1]  # (the first, given back free after the stop or acked before it)
    assert 2 not in ran and redis_client.zcard(K.cancel) == 0


def _held(redis_url: str, bodies: list[Any], cid: str = "c1") -> tuple[Broker, list[str]]:
    """A broker, and messages published and moved into consumer ``cid``'s list, each cancelled there."""
    broker = Broker(redis_url, NS)
    broker.queues.declare_options("q", Declared(0, 10_000))  # (events on, as its consumers would declare)
    with Producer(redis_url) as p:
        ids = [p.publish("q", body, result_ttl=60) for body in bodies]
        client = broker.client
        for _ in ids:
            client.lmove(K.pending, K.processing(cid), "RIGHT", "LEFT")
        client.hset(K.consumers, cid, "{}")
        assert [p.cancel("q", mid) for mid in ids] == ["stopping"] * len(ids)
    return broker, ids


@pytest.mark.parametrize("how", ["return_free", "reclaim_free", "reclaim_costly"])
def test_a_reclaim_of_a_cancelled_message_dead_letters_it(redis_url: str, redis_client: redis.Redis,
                                                           how: str) -> None:
    """A consumer's list holding a cancelled message goes back (free: a stop, a retired list; costly: a
    death): the message is dead-lettered "cancelled", its attempts counted only by a costly reclaim."""
    broker, [mid] = _held(redis_url, ["x"])
    call = {"return_free": scripts.return_free(K, "c1", reason="stopped", batch=10),
            "reclaim_free": scripts.reclaim(K, "c1", costs_attempt=False, retry_threshold=5, reason="stopped",
                                            batch=10),
            "reclaim_costly": scripts.reclaim(K, "c1", costs_attempt=True, retry_threshold=5, reason="died",
                                              batch=10)}[how]
    call.run(broker.client)
    assert _dead(redis_client) == [(mid, "cancelled")] and redis_client.llen(K.pending) == 0
    [event] = [e for e in Producer(redis_url).events("q") if e.event == "cancelled"]
    assert event.attempts == (1 if how == "reclaim_costly" else 0) and redis_client.zcard(K.cancel) == 0
    broker.close()


def test_a_due_retry_whose_cancel_was_asked_is_not_promoted(redis_url: str, redis_client: redis.Redis) -> None:
    """A retry in the delayed set whose cancel is pending (asked while it ran): the promote that finds it
    due dead-letters it "cancelled" instead of making it ready."""
    broker, [mid] = _held(redis_url, ["x"])
    [frame] = redis_client.lrange(K.processing("c1"), 0, -1)
    redis_client.lrem(K.processing("c1"), 1, frame)
    redis_client.zadd(K.delayed, {b"1" + frame[1:]: redis_ms(redis_client) - 1})  # (its attempt counted)
    scripts.promote(K, batch=10).run(broker.client)
    assert _dead(redis_client) == [(mid, "cancelled")] and redis_client.llen(K.pending) == 0
    assert redis_client.zcard(K.delayed) == 0 and redis_client.zcard(K.cancel) == 0
    broker.close()


def test_a_cancel_outlives_an_hour_of_retry_delay(start: Callable[..., Running], producer: Producer,
                                                  redis_client: redis.Redis) -> None:
    """A running message is cancelled ("stopping") and its handler raises, on a queue whose retry_delay is
    two hours; its cancel dates from over an hour ago when other cancels are asked: it never runs again."""
    go, tries = threading.Event(), []
    handle = _failing_once_told(go, tries)
    start(handle, retry_delay_s=7200)
    mid = producer.publish("q", "x", result_ttl=60)
    wait_for(lambda: tries == ["x"])
    assert producer.cancel("q", mid) == "stopping"
    redis_client.zadd(K.cancel, {mid: redis_ms(redis_client) - 2 * 3_600_000})  # (asked two hours ago)
    go.set()
    other = producer.publish("q", "y", delay=3600)
    assert producer.cancel("q", other) == "cancelled"
    for frame, _ in redis_client.zrange(K.delayed, 0, -1, withscores=True):  # (the two hours passed)
        redis_client.zadd(K.delayed, {frame: 0})
    wait_for(lambda: producer.state("q", mid) in ("cancelled", "done"))
    assert producer.state("q", mid) == "cancelled" and tries == ["x"]
    assert redis_client.zcard(K.delayed) == 0 and redis_client.llen(K.pending) == 0


def test_the_cancelled_event_says_the_attempts_spent(start: Callable[..., Running], producer: Producer,
                                                     redis_url: str, redis_client: redis.Redis) -> None:
    """Events on: a waiting message cancelled and a prefetched one its consumer dead-letters unstarted say
    attempts 0 (they never ran); one cancelled while its handler (a thread, told) ran says 1 (that run)."""
    Broker(redis_url, NS).queues.declare_options("q", Declared(0, 10_000))
    gate, ran = threading.Event(), []

    def handle(m: Any) -> None:
        ran.append(m.body)
        if m.body == 0:
            m.cancelled.wait(20)
        else:
            gate.wait(20)
    waiting = producer.publish("q", "w", delay=3600)
    assert producer.cancel("q", waiting) == "cancelled"
    ids = producer.publish_many("q", [0, 1, 2])
    run = start(handle, concurrency=2, prefetch=2, events=True)
    cid = run.consumer.identity.consumer_id
    wait_for(lambda: sorted(ran) == [0, 1] and redis_client.llen(K.processing(cid)) == 3)
    assert producer.cancel("q", ids[0]) == "stopping" and producer.cancel("q", ids[2]) == "stopping"
    run.consumer.request_cancels()
    wait_for(lambda: {e.message_id for e in producer.events("q") if e.event == "cancelled"} >= {ids[0], ids[2]})
    gate.set()
    attempts = {e.message_id: e.attempts for e in producer.events("q") if e.event == "cancelled"}
    assert attempts == {waiting: 0, ids[0]: 1, ids[2]: 0} and 2 not in ran


def test_a_message_whose_cancel_is_pending_and_whose_ttl_passed_ends_cancelled(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A waiting message with a cancel pending (asked while it was nowhere to be seen) whose ttl passes: the
    take that finds it expired dead-letters it "cancelled", counted so, not "expired"."""
    mid = producer.publish("q", "x", ttl=0.05, result_ttl=60)
    redis_client.zadd(K.cancel, {mid: redis_ms(redis_client)})
    expires = redis_ms(redis_client) + 50
    wait_for(lambda: redis_ms(redis_client) > expires)
    ran: list[Any] = []
    start(ran.append)
    wait_for(lambda: producer.state("q", mid) in ("cancelled", "dead"))
    assert producer.state("q", mid) == "cancelled" and _dead(redis_client) == [(mid, "cancelled")] and not ran
    assert redis_client.hget(K.counters, "expired") is None and redis_client.zcard(K.cancel) == 0


@pytest.mark.parametrize("parent_ends", ["done", "dead"])
def test_a_held_message_cancelled_ends_cancelled_when_its_parent_ends(
        parent_ends: str, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A tracked child held by depends_on, cancelled while it waits for its parent: whether the parent is done
    (the child would be released) or dead (the child would be dead-lettered for it), the child ends "cancelled",
    never runs, and no cancel is left behind (one left would send every ack of the queue down its slow path)."""
    go, tries = threading.Event(), []

    def handle(m: Any) -> None:
        tries.append(m.body)
        if m.body == "parent":
            go.wait(20)
            if parent_ends == "dead":
                raise ValueError("parent failed")
    start(handle, retry_delay_s=0, retry_threshold=0)
    parent = producer.publish("q", "parent", result_ttl=60)
    child = producer.publish("q", "child", depends_on=[("q", parent)], result_ttl=60)
    wait_for(lambda: tries == ["parent"])
    assert producer.cancel("q", child) == "stopping"
    go.set()
    wait_for(lambda: (child, "cancelled") in _dead(redis_client))
    producer.publish("q", "after")
    wait_for(lambda: "after" in tries)
    assert "child" not in tries and redis_client.zcard(K.cancel) == 0
    assert producer.state("q", child) == "cancelled"
