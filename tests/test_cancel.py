"""Cancelling messages: waiting, scheduled and retrying ones dead-lettered at
once; running ones stopped (a task cancelled, a thread told); cancel of
finished, unknown and odd ids; on one Redis and on the Cluster, from the
Producer and from the AsyncProducer (tests/support/clients.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import MessageFailed, deadletter
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys
from tests.support.helpers import wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients("cluster")]

K = QueueKeys(NS, "q")


def _dead(client: redis.Redis) -> list[tuple[str, str]]:
    """(id, reason) of each dead letter, oldest first."""
    letters = [deadletter.DeadLetter(raw) for raw in reversed(client.lrange(K.dead, 0, -1))]
    return [(d.ref, d.reason) for d in letters]


def test_waiting_scheduled_and_retrying_messages_are_dead_lettered_at_once(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A pending, a scheduled and a retrying message: "cancelled" each, dead-lettered "cancelled", never run."""
    pending = producer.publish("q", "p", result_ttl=60)
    scheduled = producer.publish("q", "s", delay=3600)
    assert producer.cancel("q", pending) == "cancelled" and producer.cancel("q", scheduled) == "cancelled"
    tries: list[Any] = []

    def fail(m: Any) -> None:
        tries.append(m.body)
        raise ValueError("again")
    start(fail, retry_delay_s=3600)
    retrying = producer.publish("q", "r", result_ttl=60)
    wait_for(lambda: producer.state("q", retrying) == "retrying")
    assert producer.cancel("q", retrying) == "cancelled"
    assert _dead(redis_client) == [(pending, "cancelled"), (scheduled, "cancelled"), (retrying, "cancelled")]
    with pytest.raises(MessageFailed) as failed:
        producer.result("q", pending, timeout=0)
    assert failed.value.reason == "cancelled" and producer.state("q", retrying) == "cancelled"
    assert tries == ["r"] and redis_client.hget(K.counters, "cancelled") == b"3"


def test_a_running_async_task_is_cancelled_and_only_it(start: Callable[..., Running], producer: Producer,
                                                       redis_client: redis.Redis) -> None:
    """Concurrency 10, ten long tasks: cancelling one stops that task; the other nine finish done."""
    gate, started, cancelled = asyncio.Event(), [], []

    async def handle(m: Any) -> str:
        started.append(m.body)
        try:
            while not gate.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            cancelled.append(m.body)
            raise
        return "ok"
    run = start(handle, concurrency=10)
    ids = [producer.publish("q", i, result_ttl=60) for i in range(10)]
    try:
        wait_for(lambda: len(started) == 10)
        assert producer.cancel("q", ids[3]) == "stopping"
        run.consumer.request_cancels()  # (what the supervisor's SIGUSR2 does; a process test sends it for real)
        with pytest.raises(MessageFailed) as failed:
            producer.result("q", ids[3], timeout=10)
        assert failed.value.reason == "cancelled"
        wait_for(lambda: cancelled == [3])  # (settled as it is cancelled: the task sees it on its next step)
    finally:
        run.consumer.runner.loop.call_soon_threadsafe(gate.set)  # type: ignore[union-attr]
    assert [producer.result("q", mid, timeout=10) for mid in ids if mid != ids[3]] == ["ok"] * 9
    assert _dead(redis_client) == [(ids[3], "cancelled")]


def test_a_thread_is_told_through_message_cancelled(start: Callable[..., Running], producer: Producer) -> None:
    """A sync handler on threads sees message.cancelled set and returns: the message is dead-lettered "cancelled"."""
    seen = threading.Event()

    def handle(m: Any) -> str:
        seen.set()
        m.cancelled.wait(20)
        return "returned anyway"
    run = start(handle, concurrency=2)
    mid = producer.publish("q", 1, result_ttl=60)
    seen.wait(10)
    assert producer.cancel("q", mid) == "stopping"
    run.consumer.request_cancels()
    with pytest.raises(MessageFailed) as failed:
        producer.result("q", mid, timeout=10)
    assert failed.value.reason == "cancelled"


def test_a_prefetched_frame_is_dead_lettered_without_running(start: Callable[..., Running],
                                                             producer: Producer) -> None:
    """Prefetch 4 behind a long message: cancelling a prefetched one dead-letters it; it never runs."""
    gate, ran = threading.Event(), []

    def handle(m: Any) -> None:
        ran.append(m.body)
        gate.wait(20)
    ids = producer.publish_many("q", [0, 1, 2], result_ttl=60)
    run = start(handle, prefetch=4)
    wait_for(lambda: ran == [0] and producer.state("q", ids[2]) == "active")
    assert producer.cancel("q", ids[2]) == "stopping"
    run.consumer.request_cancels()
    gate.set()
    with pytest.raises(MessageFailed):
        producer.result("q", ids[2], timeout=10)
    assert producer.result("q", ids[1], timeout=10) is None and ran == [0, 1]


def test_cancel_of_finished_unknown_and_odd_ids(start: Callable[..., Running], producer: Producer) -> None:
    """Done: says "done" (twice); never published: "unknown"; odd ids and queues: MessageError before Redis."""
    start(lambda m: "x")
    mid = producer.publish("q", 1, result_ttl=60)
    assert producer.result("q", mid, timeout=10) == "x"
    assert producer.cancel("q", mid) == "done" and producer.cancel("q", mid) == "done"
    assert producer.cancel("q", "no-such-message") == "unknown"
    for odd in ("a b", "", "x" * 129, "../../etc", "\udcff", 7, None):
        with pytest.raises(MessageError):
            producer.cancel("q", odd)  # type: ignore[arg-type]
    with pytest.raises(MessageError):
        producer.cancel("bad queue name!", mid)


def test_garbage_in_the_cancel_set_costs_no_message(start: Callable[..., Running], producer: Producer,
                                                    redis_client: redis.Redis) -> None:
    """A cancel set holding a string: a cancel still dead-letters a waiting message, and the queue flows."""
    redis_client.set(K.cancel, "junk")
    mid = producer.publish("q", 1, delay=3600)
    assert producer.cancel("q", mid) == "cancelled"
    seen: list[Any] = []
    start(lambda m: seen.append(m.body))
    producer.publish("q", 2)
    wait_for(lambda: seen == [2])


def test_a_waiting_grouped_message_is_dead_lettered_and_its_group_goes_on(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Three waiting messages of group g: cancelling the second says "cancelled", it never runs, the others do."""
    ids = [producer.publish("q", i, group="g", result_ttl=60) for i in range(3)]
    assert producer.cancel("q", ids[1]) == "cancelled" and producer.cancel("q", ids[1]) == "cancelled"
    assert producer.state("q", ids[1]) == "cancelled" and _dead(redis_client) == [(ids[1], "cancelled")]
    seen: list[Any] = []
    start(lambda m: seen.append(m.body))
    assert [producer.result("q", mid, timeout=10) for mid in (ids[0], ids[2])] == [None, None]
    assert seen == [0, 2]
