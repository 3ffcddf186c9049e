"""The queue core in one process: publish, consume, ack, retries, dead letters."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import deadletter, framing, message
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.ids import new_id
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from tests.support.helpers import client_for, wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]


def test_publish_consume_ack_in_fifo_order(start: Callable[..., Running], producer: Producer,
                                           redis_client: redis.Redis) -> None:
    """One consumer gets every message once, in publish order, and acks each."""
    seen: list[Any] = []
    ids = producer.publish_many("q", list(range(200)))
    ids.append(producer.publish("q", {"last": True}, headers={"h": "v"}))
    start(lambda m: seen.append((m.id, m.body, m.headers, m.attempts)))
    wait_for(lambda: len(seen) == 201, message=f"handled {len(seen)} of 201")
    assert [s[0] for s in seen] == ids
    assert [s[1] for s in seen[:200]] == list(range(200))
    assert seen[-1][1:] == ({"last": True}, {"h": "v"}, 0)
    k = QueueKeys(NS, "q")
    wait_for(lambda: redis_client.llen(k.pending) == 0)
    assert not any(redis_client.llen(k.processing(c.decode())) for c in redis_client.hkeys(k.consumers))


def test_failing_handler_is_retried_threshold_times_then_dead_lettered(
        start: Callable[..., Running], producer: Producer, redis_url: str) -> None:
    """retry_threshold=3: four runs in all, then a dead letter with the exception type and text."""
    attempts: list[int] = []

    def handler(m: Any) -> None:
        attempts.append(m.attempts)
        raise KeyError("no such order 42")

    mid = producer.publish("q", {"order": 42})
    start(handler, retry_threshold=3)
    broker = Broker(redis_url, NS)
    wait_for(lambda: broker.statistics.sizes("q")["dead"] == 1)
    assert attempts == [0, 1, 2, 3]
    [entry] = broker.contents.dead_letters("q")
    dead = deadletter.DeadLetter(entry)
    assert dead.reason == "KeyError: 'no such order 42'"
    assert dead.meta["error_type"] == "KeyError"
    assert "Traceback" in dead.meta["traceback"]
    dead_msg = dead.message()
    assert dead_msg is not None and dead_msg.id == mid and dead_msg.attempts == 4
    assert broker.statistics.sizes("q") == {"pending": 0, "scheduled": 0, "delayed": 0, "dead": 1}


@pytest.mark.sync_client_only("the consumers' order and timing; the producer only publishes (its frames: test_async_producer)")
def test_retry_delay_is_honoured_by_the_redis_clock(start: Callable[..., Running], producer: Producer,
                                                     redis_client: redis.Redis) -> None:
    """A failed message waits retry_delay in the delayed set before its next attempt."""
    times: list[float] = []

    def handler(m: Any) -> None:
        times.append(time.monotonic())
        if m.attempts < 2:
            raise RuntimeError("not yet")

    producer.publish("q", "x")
    start(handler, retry_threshold=5, retry_delay_s=0.5)
    wait_for(lambda: len(times) == 3, message=f"{len(times)} attempts")
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(0.5 <= g < 1.5 for g in gaps), gaps
    assert redis_client.zcard(QueueKeys(NS, "q").delayed) == 0


@pytest.mark.sync_client_only("the consumers' order and timing; the producer only publishes (its frames: test_async_producer)")
def test_retry_backoff_grows_the_delay(start: Callable[..., Running], producer: Producer,
                                       redis_client: redis.Redis) -> None:
    """With retry_backoff 2, the second retry waits twice the first."""
    times: list[float] = []

    def handler(m: Any) -> None:
        times.append(time.monotonic())
        raise RuntimeError("again")

    producer.publish("q", "x")
    start(handler, retry_threshold=2, retry_delay_s=0.3, retry_backoff=2.0)
    wait_for(lambda: len(times) == 3, message=f"{len(times)} attempts")
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert 0.3 <= gaps[0] < 0.6 + 0.5 and 0.6 <= gaps[1] < 1.2 + 0.5, gaps


def test_malformed_bytes_are_dead_lettered_and_the_consumer_goes_on(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, redis_url: str) -> None:
    """Bytes that are not a frame, or a frame that is not an envelope, become 'malformed' dead letters."""
    k = QueueKeys(NS, "q")
    seen: list[Any] = []
    redis_client.lpush(k.pending, b"\xff\xfe not a frame", b"0|{not json", b'0|{"id":"x"}', b"0|[1,2]")
    producer.publish("q", "good")
    start(lambda m: seen.append(m.body))
    wait_for(lambda: seen == ["good"])
    broker = Broker(redis_url, NS)
    wait_for(lambda: broker.statistics.sizes("q")["dead"] == 4)
    dead = [deadletter.DeadLetter(e) for e in broker.contents.dead_letters("q")]
    assert {d.reason for d in dead} == {"malformed"}
    assert b"\xff\xfe not a frame" in {d.frame for d in dead}


@pytest.mark.parametrize("payload_body", ["9223372036854775807", "[]", "{}", '{"a":[],"b":{},"n":-9223372036854775808}'])
def test_payload_bytes_survive_retries_and_dead_lettering(
        start: Callable[..., Running], redis_client: redis.Redis, redis_url: str, payload_body: str) -> None:
    """Big integers, [] and {} come out of retries and the dead-letter list byte for byte."""
    k = QueueKeys(NS, "q")
    payload = ('{"id":"01","queue":"q","body":%s,"created_at":1.5,"headers":{}}' % payload_body).encode()
    redis_client.lpush(k.pending, framing.frame(payload))
    bodies: list[Any] = []

    def handler(m: Any) -> None:
        bodies.append(m.body)
        raise ValueError("always")

    start(handler, retry_threshold=2)
    broker = Broker(redis_url, NS)
    wait_for(lambda: broker.statistics.sizes("q")["dead"] == 1)
    [entry] = broker.contents.dead_letters("q")
    assert deadletter.DeadLetter(entry).frame == b"3|" + payload
    assert bodies == [json.loads(payload_body)] * 3
    # And back through the dead-letter requeue: attempts reset, payload identical.
    broker.contents.dlq_requeue("q", [entry])
    wait_for(lambda: broker.statistics.sizes("q")["dead"] == 1 and len(bodies) == 6)
    [entry] = broker.contents.dead_letters("q")
    assert deadletter.DeadLetter(entry).frame == b"3|" + payload


def test_async_handlers_run_on_an_event_loop(start: Callable[..., Running], producer: Producer) -> None:
    """An async def handler is awaited; its exception is an unack like any other."""
    import asyncio

    seen: list[Any] = []

    async def handler(m: Any) -> None:
        await asyncio.sleep(0.001)
        if m.body == "bad" and m.attempts == 0:
            raise ValueError("first time")
        seen.append((m.body, m.attempts))

    producer.publish_many("q", ["a", "bad", "b"])
    start(handler)
    wait_for(lambda: len(seen) == 3)
    assert sorted(seen) == [("a", 0), ("b", 0), ("bad", 1)]


def test_oversize_publish_is_refused_with_a_clear_error(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis) -> None:
    """A message over max_message_size is refused before anything is sent."""
    with new_producer(redis_url, max_message_size=1000) as p:
        with pytest.raises(MessageError, match=r"exceeds the limit of 1000 bytes"):
            p.publish("q", "x" * 1000)
        with pytest.raises(MessageError, match="exceeds"):
            p.publish_many("q", ["ok", "y" * 2000])
    assert redis_client.llen(QueueKeys(NS, "q").pending) == 0


def test_default_size_limit_is_one_mebibyte(new_producer: Callable[..., Producer], redis_url: str) -> None:
    """The default limit refuses a message just over 1 MiB and accepts one under it."""
    with new_producer(redis_url) as p:
        p.publish("q", "x" * (1024 * 1024 - 200))
        with pytest.raises(MessageError, match="1048576 bytes"):
            p.publish("q", "x" * (1024 * 1024))


@pytest.mark.parametrize("name", ["", "a{b}", "a:b", "with space", "x" * 200])
def test_bad_queue_names_are_refused(new_producer: Callable[..., Producer], redis_url: str, name: str) -> None:
    """Queue names that would break the key schema are refused."""
    with new_producer(redis_url) as p, pytest.raises(MessageError):
        p.publish(name, 1)


def test_non_json_body_is_refused(new_producer: Callable[..., Producer], redis_url: str) -> None:
    """A body that JSON cannot encode is refused with the queue named."""
    with new_producer(redis_url) as p, pytest.raises(MessageError, match="'q'.*JSON"):
        p.publish("q", {1, 2})


def test_ids_are_unique_and_time_ordered() -> None:
    """Message ids never repeat and sort in creation order."""
    ids = [new_id() for _ in range(20000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


def test_late_ack_is_a_counted_no_op(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis) -> None:
    """An ack for a message reclaimed meanwhile deletes nothing and is counted."""
    broker = Broker(redis_url, NS)
    with new_producer(redis_url) as p:
        p.publish("q", "x")
    frame, _ = broker.messages.fetch("q", "c1", 1)
    assert frame is not None
    r = broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="consumer lost")
    assert (r.requeued, r.dead_lettered) == (1, 0)
    # The reclaimed copy is back in pending with one attempt counted.
    assert redis_client.lrange(QueueKeys(NS, "q").pending, 0, -1) == [b"1" + frame[1:]]
    # Another consumer takes it; the first one's late ack must not touch it.
    assert broker.messages.fetch("q", "c2", 1) == (b"1" + frame[1:], False)
    assert broker.messages.ack("q", "c1", frame, False).acked is False
    assert broker.statistics.counters("q")["late_acks"] == 1
    assert redis_client.llen(QueueKeys(NS, "q").processing("c2")) == 1


def test_reclaim_without_cost_keeps_attempts_and_order(redis_url: str, redis_client: redis.Redis) -> None:
    """A graceful reclaim returns frames unchanged, oldest first at the consuming end."""
    broker = Broker(redis_url, NS)
    k = QueueKeys(NS, "q")
    frames = [b"0|a", b"2|b", b"1|c"]
    redis_client.lpush(k.processing("c1"), *frames)  # c is newest
    redis_client.hset(k.consumers, "c1", "{}")
    broker.reclaim_batch = 2
    r = broker.messages.return_stopped("q", "c1", reason="stopped")
    assert (r.requeued, r.dead_lettered, r.remaining) == (3, 0, 0)
    # Consumers take from the right: a first.
    assert [redis_client.rpop(k.pending) for _ in range(3)] == frames
    assert not redis_client.hexists(k.consumers, "c1")


def test_reclaim_with_cost_dead_letters_past_the_threshold(redis_url: str, redis_client: redis.Redis) -> None:
    """A costly reclaim adds an attempt and dead-letters what passes retry_threshold, with the reason; one that
    reaches retry_threshold exactly is retried still."""
    broker = Broker(redis_url, NS)
    k = QueueKeys(NS, "q")
    redis_client.lpush(k.processing("c1"), b"3|x", b"1|y", b"2|z", b"garbage")
    r = broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="killed by signal 9")
    assert (r.requeued, r.dead_lettered) == (2, 2)
    assert sorted(redis_client.lrange(k.pending, 0, -1)) == [b"2|y", b"3|z"]
    dead = {deadletter.DeadLetter(e).frame: deadletter.DeadLetter(e).reason for e in redis_client.lrange(k.dead, 0, -1)}
    assert dead == {b"4|x": "killed by signal 9", b"garbage": "killed by signal 9"}


def test_reclaim_checks_the_lock_token(redis_url: str, redis_client: redis.Redis) -> None:
    """With a lock given, reclaim refuses to act unless the lock holds the caller's token."""
    from smqsup.errors import NotLeader

    broker = Broker(redis_url, NS)
    k = QueueKeys(NS, "q")
    redis_client.lpush(k.processing("c1"), b"0|x")
    redis_client.set(k.gc_lock, "other")
    with pytest.raises(NotLeader, match="no longer holds the collector lock"):
        broker.registry.reclaim_stale("q", "c1", retry_threshold=3, reason="r", stale_after_ms=1000, lock=(k.gc_lock, "mine"))
    assert redis_client.llen(k.processing("c1")) == 1
    redis_client.set(k.gc_lock, "mine")
    broker.registry.reclaim_stale("q", "c1", retry_threshold=3, reason="r", stale_after_ms=1000, lock=(k.gc_lock, "mine"))
    assert redis_client.llen(k.pending) == 1


def _held_by_c1(broker: Broker, redis_client: redis.Redis, *frames: bytes) -> QueueKeys:
    """Register consumer c1 (a fresh heartbeat) holding ``frames`` (the last newest)."""
    from smqsup.store.core.consumer_info import ConsumerInfo

    k = QueueKeys(NS, "q")
    broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.lpush(k.processing("c1"), *frames)
    return k


def test_reclaim_dead_costs_an_attempt_and_unregisters_once_empty(redis_url: str,
                                                                  redis_client: redis.Redis) -> None:
    """reclaim_dead adds an attempt to each message and retires the consumer when its list is empty."""
    broker = Broker(redis_url, NS)
    k = _held_by_c1(broker, redis_client, b"0|a", b"1|b")
    r = broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="killed by signal 9")
    assert (r.requeued, r.dead_lettered, r.remaining) == (2, 0, 0)
    assert [redis_client.rpop(k.pending) for _ in range(2)] == [b"1|a", b"2|b"]
    assert not redis_client.hexists(k.consumers, "c1") and redis_client.zscore(k.heartbeats, "c1") is None
    assert redis_client.zscore(k.retired, "c1") is not None


def test_return_stopped_is_free_and_unregisters(redis_url: str, redis_client: redis.Redis) -> None:
    """return_stopped keeps attempts as they are and unregisters the consumer."""
    broker = Broker(redis_url, NS)
    k = _held_by_c1(broker, redis_client, b"3|a")
    r = broker.messages.return_stopped("q", "c1", reason="consumer stopped")
    assert (r.requeued, r.dead_lettered, r.remaining) == (1, 0, 0)
    assert redis_client.lrange(k.pending, 0, -1) == [b"3|a"]
    assert not redis_client.hexists(k.consumers, "c1") and redis_client.zscore(k.retired, "c1") is not None


def test_reclaim_stale_leaves_a_consumer_with_a_fresh_heartbeat_alone(redis_url: str,
                                                                      redis_client: redis.Redis) -> None:
    """reclaim_stale does nothing (remaining -1) while the heartbeat is younger than stale_after_ms."""
    broker = Broker(redis_url, NS)
    k = _held_by_c1(broker, redis_client, b"0|a")
    r = broker.registry.reclaim_stale("q", "c1", retry_threshold=3, reason="consumer lost", stale_after_ms=60_000)
    assert (r.requeued, r.dead_lettered, r.remaining) == (0, 0, -1)
    assert redis_client.lrange(k.processing("c1"), 0, -1) == [b"0|a"]
    assert redis_client.hexists(k.consumers, "c1") and redis_client.zscore(k.retired, "c1") is None


def test_reclaim_stale_takes_a_stale_consumers_list_at_a_cost(redis_url: str, redis_client: redis.Redis) -> None:
    """reclaim_stale on a heartbeat older than stale_after_ms costs an attempt and unregisters."""
    broker = Broker(redis_url, NS)
    k = _held_by_c1(broker, redis_client, b"3|a", b"0|b")
    redis_client.zadd(k.heartbeats, {"c1": 1})  # 1970
    redis_client.set(k.gc_lock, "mine")
    r = broker.registry.reclaim_stale("q", "c1", retry_threshold=3, reason="consumer lost", stale_after_ms=60_000,
                                      lock=(k.gc_lock, "mine"))
    assert (r.requeued, r.dead_lettered, r.remaining) == (1, 1, 0)
    assert redis_client.lrange(k.pending, 0, -1) == [b"1|b"]
    assert deadletter.DeadLetter(redis_client.lindex(k.dead, 0)).frame == b"4|a"
    assert not redis_client.hexists(k.consumers, "c1") and redis_client.zscore(k.retired, "c1") is not None


def test_sweep_retired_is_free_under_the_lock_and_leaves_the_registry_alone(redis_url: str,
                                                                            redis_client: redis.Redis) -> None:
    """sweep_retired refuses a wrong lock, then returns the list unchanged without touching the registry."""
    from smqsup.errors import NotLeader

    broker = Broker(redis_url, NS)
    k = _held_by_c1(broker, redis_client, b"3|a", b"garbage")
    redis_client.set(k.gc_lock, "other")
    with pytest.raises(NotLeader):
        broker.registry.sweep_retired("q", "c1", lock=(k.gc_lock, "mine"))
    assert redis_client.llen(k.processing("c1")) == 2
    redis_client.set(k.gc_lock, "mine")
    r = broker.registry.sweep_retired("q", "c1", lock=(k.gc_lock, "mine"))
    assert (r.requeued, r.dead_lettered, r.remaining) == (1, 1, 0)
    assert redis_client.lrange(k.pending, 0, -1) == [b"3|a"]
    assert deadletter.DeadLetter(redis_client.lindex(k.dead, 0)).reason == "found in a retired consumer's list"
    assert redis_client.hexists(k.consumers, "c1") and redis_client.zscore(k.heartbeats, "c1") is not None
    assert redis_client.zscore(k.retired, "c1") is None


def test_return_held_is_free_and_leaves_the_registry_alone(redis_url: str, redis_client: redis.Redis) -> None:
    """return_held (a supervised consumer's own stop) returns its list unchanged and stays registered."""
    broker = Broker(redis_url, NS)
    broker.reclaim_batch = 1
    k = _held_by_c1(broker, redis_client, b"2|a", b"0|b")
    r = broker.messages.return_held("q", "c1", reason="consumer stopped")
    assert (r.requeued, r.dead_lettered, r.remaining) == (2, 0, 0)
    assert [redis_client.rpop(k.pending) for _ in range(2)] == [b"2|a", b"0|b"]
    assert redis_client.hexists(k.consumers, "c1") and redis_client.zscore(k.retired, "c1") is None


def test_stop_finishes_the_message_in_hand(start: Callable[..., Running], producer: Producer,
                                           redis_client: redis.Redis) -> None:
    """request_stop() during a handler lets it finish and ack; nothing else is fetched."""
    started = threading.Event()
    release = threading.Event()
    done: list[str] = []

    def handler(m: Any) -> None:
        started.set()
        release.wait(10)
        done.append(m.body)

    producer.publish_many("q", ["first", "second"])
    r = start(handler)
    assert started.wait(10)
    r.consumer.request_stop()
    release.set()
    r.stop()
    assert done == ["first"]
    k = QueueKeys(NS, "q")
    [left] = redis_client.lrange(k.pending, 0, -1)
    assert message.decode(left).body == "second"
    assert redis_client.hlen(k.consumers) == 0


def test_publish_while_redis_is_down_is_certainly_not_sent(new_producer: Callable[..., Producer], redis_server: Any, redis_url: str,
                                                            redis_client: redis.Redis) -> None:
    """Redis unreachable: PublishNotSent (nothing queued); after it restarts the same producer works at once."""
    from smqsup.errors import PublishNotSent

    with new_producer(redis_url) as p:
        p.publish("q", "before")
        redis_server.kill()
        with pytest.raises(PublishNotSent) as caught:
            p.publish("q", "while down")
        redis_server.start()
        # The held connection went stale with the restart: it is replaced before
        # sending, so this publish neither fails nor is left uncertain.
        p.publish("q", "after")
    client = client_for(redis_url)
    bodies = [message.decode(f).body for f in client.lrange(QueueKeys(NS, "q").pending, 0, -1)]
    assert bodies == ["after", "before"]
    assert caught.value.message_ids and len(caught.value.message_ids) == 1


@pytest.mark.single_node("maxmemory set on one server")
def test_publish_many_refused_part_way_says_which_ids_are_queued(new_producer: Callable[..., Producer], redis_url: str,
                                                                  redis_client: redis.Redis) -> None:
    """Redis out of memory after some chunks: PublishRefused lists exactly the queued and the unqueued ids."""
    from smqsup.errors import PublishRefused

    used = int(redis_client.info("memory")["used_memory"])
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", used + 900_000)
    try:
        # The refusal leaves the with block: the producer's close() (its
        # statistics flush, maybe refused too) must not replace it.
        with pytest.raises(PublishRefused) as caught, new_producer(redis_url) as p:
            p.publish_many("q", ["x" * 500] * 5000)
    finally:
        redis_client.config_set("maxmemory", 0)
    exc = caught.value
    queued = [message.decode(f).id for f in redis_client.lrange(QueueKeys(NS, "q").pending, 0, -1)]
    assert 0 < len(exc.queued_ids) < 5000
    assert sorted(queued) == sorted(exc.queued_ids)
    assert len(exc.queued_ids) + len(exc.not_queued_ids) == 5000
    assert not set(exc.queued_ids) & set(exc.not_queued_ids)
    assert redis_client.hget(QueueKeys(NS, "q").counters, "published") == str(len(queued)).encode()


@pytest.mark.single_node("maxmemory set on one server")
def test_refused_publish_is_what_the_caller_sees_when_close_is_refused_too(new_producer: Callable[..., Producer], redis_url: str,
                                                                            redis_client: redis.Redis) -> None:
    """Redis out of memory: the with block raises PublishRefused, not close()'s refused statistics flush."""
    from smqsup.errors import PublishRefused

    redis_client.config_set("maxmemory-policy", "noeviction")
    try:
        with pytest.raises(PublishRefused) as caught, new_producer(redis_url) as p:
            first = p.publish("q", "queued")  # published > 0: close() will flush statistics
            redis_client.config_set("maxmemory", 1)  # from now on every write is refused (OOM)
            p.publish("q", "refused")
    finally:
        redis_client.config_set("maxmemory", 0)
    assert "maxmemory" in str(caught.value) and caught.value.queued_ids == []
    assert [message.decode(f).id for f in redis_client.lrange(QueueKeys(NS, "q").pending, 0, -1)] == [first]


@pytest.mark.single_node("maxmemory set on one server")
def test_close_does_not_raise_when_redis_refuses_the_statistics(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis) -> None:
    """close() after a successful publish returns normally though Redis refuses every write (OOM)."""
    p = new_producer(redis_url)
    p.publish("q", "queued")
    redis_client.config_set("maxmemory-policy", "noeviction")
    redis_client.config_set("maxmemory", 1)
    try:
        p.close()
    finally:
        redis_client.config_set("maxmemory", 0)
    assert redis_client.llen(QueueKeys(NS, "q").pending) == 1


def test_first_publish_while_redis_is_down_is_certainly_not_sent(new_producer: Callable[..., Producer], redis_server: Any, redis_url: str) -> None:
    """Redis unreachable at a producer's first publish (the pipelined path): PublishNotSent, not uncertain."""
    from smqsup.errors import PublishNotSent

    redis_server.kill()
    with pytest.raises(PublishNotSent) as caught, new_producer(redis_url) as p:
        p.publish("q", "while down")
    assert "not queued" in str(caught.value) and len(caught.value.message_ids) == 1


def test_every_script_is_sent_with_its_includes_inlined_once() -> None:
    """No include line reaches Redis, and a fragment named by two includes is defined once."""
    from smqsup.store import scripts

    for script in scripts.ALL:
        assert "@include" not in script.text, script.name
        for fragment in ("now_ms", "attempts_of", "not_leader", "wrong_type", "dead_letter"):
            assert script.text.count(f"local function {fragment}(") <= 1, (script.name, fragment)


def test_scripts_unknown_to_the_server_are_sent_by_text_alone_and_in_a_pipeline(
        redis_url: str, redis_client: redis.Redis) -> None:
    """After SCRIPT FLUSH (a restarted Redis), a publish, a pipelined push and heartbeat still run, each once."""
    from smqsup.store.core.consumer_info import ConsumerInfo
    from smqsup.store.ops import messages

    broker = Broker(redis_url, NS)
    k = QueueKeys(NS, "q")
    broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.script_flush()
    broker.messages.push("q", [b"0|a"], register=False)  # alone, on the held connection
    redis_client.script_flush()
    frames = [b"0|%d" % i for i in range(messages.PUBLISH_CHUNK + 5)]
    broker.messages.push("q", frames, register=True, producer=("p1", '{"published":1}'))  # one pipeline, three scripts
    assert redis_client.llen(k.pending) == 1 + len(frames)
    assert int(redis_client.hget(k.counters, "published") or 0) == 1 + len(frames)
    assert list(broker.statistics.producers()) == [b"p1"]
    redis_client.script_flush()
    assert broker.registry.heartbeat({"q": [("c1", ConsumerInfo(pid=1)), ("gone", ConsumerInfo(pid=2))]}) == (
        [("q", "gone")], {}, [])
    # Each script call that NOSCRIPT refused went again by EVAL, once: the first registration (a new
    # server), two publish chunks and the producer statistics, the heartbeat; a publish alone is no
    # script (LPUSH and its count). (A cluster's masters each count their own: the figures above are
    # the check there.)
    if not broker.clustered:
        assert redis_client.info("commandstats")["cmdstat_eval"]["calls"] == 5


def test_read_queues_reads_sizes_and_registry_of_every_queue(redis_url: str, redis_client: redis.Redis) -> None:
    """read_queues: the Redis clock, then per queue its sizes (processing summed over registered consumers),
    each consumer's list length, the stored hashes and the latest history points, newest first."""
    broker = Broker(redis_url, NS)
    k = _held_by_c1(broker, redis_client, b"0|a", b"0|b")
    redis_client.lpush(k.pending, b"0|c")
    redis_client.lpush(k.dead, b"{}\n0|d")
    redis_client.set(k.gc_lock, "token")
    for t in (1, 2, 3):
        broker.statistics.append_point("q", json.dumps({"t": t}), keep=2)
    now_ms, readings = broker.statistics.read_queues(["q", "empty"], recent=5)
    assert abs(now_ms - time.time() * 1000) < 60_000
    q, empty = readings["q"], readings["empty"]
    assert q.sizes == {"pending": 1, "scheduled": 0, "delayed": 0, "dead": 1, "processing": 2}
    assert list(q.consumers) == [b"c1"] and q.held == [2] and [m for m, _ in q.heartbeats] == [b"c1"]
    assert q.leader == b"token" and q.recent == [b'{"t": 3}', b'{"t": 2}']
    assert broker.statistics.series("q", 1) == [b'{"t": 3}']
    assert empty.sizes == {"pending": 0, "scheduled": 0, "delayed": 0, "dead": 0, "processing": 0} and empty.consumers == {}
    assert broker.statistics.read_queues(["q"])[1]["q"].recent == []  # no points asked for


def test_redis_py_reads_its_version_once_per_process_not_per_connection(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections after the first client are made without redis-py reading its package metadata again
    (in a forked consumer, each read wrote about 1.4 MB of pages shared with the supervisor)."""
    import redis.utils

    Broker(redis_url).close()  # the process's first client: the version is read here, once
    reads: list[int] = []
    real = redis.utils.get_lib_version

    def counted() -> str:
        reads.append(1)
        return str(real())

    monkeypatch.setattr(redis.utils, "get_lib_version", counted)
    for i in range(3):
        broker = Broker(redis_url)
        try:
            assert broker.queues.paused_flag(f"q{i}") is None  # a connection made, its handshake done
        finally:
            broker.close()
    assert reads == []
