"""Lifecycle events (queue option ``events``): each step of a message's life
added to its queue's capped stream by the script that makes the step, read
with Producer.events; on one Redis and on the Redis Cluster, partitioned too."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import Reject, framing
from smqsup.client.producer import Producer
from smqsup.errors import BrokerError, MessageError
from smqsup.keys import QueueKeys, partition_names
from smqsup.store.broker import Broker
from smqsup.store.core.declared import Declared
from tests.conftest import client_for
from tests.support import clients
from tests.support.helpers import redis_ms, servers_of, until, wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]

K = QueueKeys(NS, "q")


def _declared(url: str, queue: str = "q", events_max: int = 10_000, result_ttl_s: int = 0) -> None:
    """Declare the queue's options as its consumers would, before any starts."""
    Broker(url, NS).queues.declare_options(queue, Declared(result_ttl_s, events_max))


def _until_declared(producer: Producer, queue: str = "q") -> None:
    """Wait until the producer reads that the queue's consumers declared events."""
    wait_for(lambda: clients.declared_now(producer, queue)[1].events_max > 0)


def _of(producer: Producer, mid: str, queue: str = "q") -> list[str]:
    return [e.event for e in producer.events(queue) if e.message_id == mid]


def test_one_messages_events_come_in_order(start: Callable[..., Running], producer: Producer,
                                           redis_url: str) -> None:
    """published, started, progress, done: in that order, with its attempts; nothing for plain queues."""
    def handle(m: Any) -> str:
        m.progress(0.5)
        return "ok"
    start(handle, events=True)
    _until_declared(producer)
    mid = producer.publish("q", {"n": 1})
    wait_for(lambda: _of(producer, mid)[-1:] == ["done"])
    events = [e for e in producer.events("q") if e.message_id == mid]
    assert [e.event for e in events] == ["published", "started", "progress", "done"]
    assert [e.attempts for e in events] == [0, 0, 0, 0]
    assert events[2].data == 0.5 and events[0].at_ms <= events[-1].at_ms
    assert [e.cursor for e in events] == sorted((e.cursor for e in events), key=lambda c: tuple(map(int, c.split("-"))))


def test_retries_and_death_are_events_with_the_reason(start: Callable[..., Running], producer: Producer,
                                                      redis_url: str) -> None:
    """A handler that fails twice then Rejects: retried, retried, dead with its reason in data."""
    _declared(redis_url)
    def handle(m: Any) -> None:
        if m.attempts < 2:
            raise RuntimeError("boom")
        raise Reject("no")
    start(handle, events=True, retry_delay_s=0)
    mid = producer.publish("q", 1)
    wait_for(lambda: _of(producer, mid)[-1:] == ["dead"])
    events = [e for e in producer.events("q") if e.message_id == mid]
    assert [e.event for e in events] == ["published", "started", "retried", "started", "retried", "started", "dead"]
    assert events[-1].data["reason"].startswith("rejected")


def test_a_retried_event_says_why_and_when(start: Callable[..., Running], producer: Producer,
                                          redis_url: str) -> None:
    """A handler that raises ValueError, then asks Retry(delay=0.2, reason=...), then returns: each
    "retried" event's data names the error's type and reason and the delay it waits (ms, 0: at once)."""
    from smqsup import Retry
    _declared(redis_url)

    def handle(m: Any) -> None:
        if m.attempts == 0:
            raise ValueError("boom")
        if m.attempts == 1:
            raise Retry(delay=0.2, reason="bank busy")
    start(handle, events=True, retry_delay_s=0)
    mid = producer.publish("q", 1)
    wait_for(lambda: _of(producer, mid)[-1:] == ["done"])
    first, second = [e.data for e in producer.events("q") if e.message_id == mid and e.event == "retried"]
    assert first == {"reason": "ValueError: boom", "error_type": "ValueError", "delay_ms": 0}
    assert second["error_type"] == "Retry" and "bank busy" in second["reason"] and second["delay_ms"] == 200


def test_expiry_cancel_removal_and_requeue_are_events(start: Callable[..., Running], producer: Producer,
                                                      redis_url: str, redis_client: redis.Redis) -> None:
    """expired (ttl passed before a take), cancelled (waiting), removed (scheduled), requeued (from the
    dead letters): each its own event, the reason in data."""
    from smqsup.views import browse, deadletters
    _declared(redis_url)
    broker = Broker(redis_url, NS)
    gone = producer.publish("q", "gone", ttl=0.05)
    stopped = producer.publish("q", "stopped")
    later = producer.publish("q", "later", delay=3600)
    assert producer.cancel("q", stopped) == "cancelled"
    assert browse.remove(broker, "q", [later]) == {later: True}
    [expires] = [framing.frame_head(f).expires_ms for f in redis_client.lrange(K.pending, 0, -1)
                 if framing.peek_id(f) == gone]
    wait_for(lambda: redis_ms(redis_client) > (expires or 0))  # its ttl passed, by the clock the scripts read
    start(lambda m: None, events=True)
    wait_for(lambda: _of(producer, gone)[-1:] == ["expired"])
    assert _of(producer, stopped) == ["published", "cancelled"] and _of(producer, later) == ["published", "removed"]
    by_id = {e.message_id: e for e in producer.events("q") if e.event in ("expired", "cancelled", "removed")}
    assert [by_id[m].data["reason"] for m in (gone, stopped, later)] == ["expired", "cancelled", "removed"]
    assert deadletters.requeue(broker, "q", [stopped]) == 1
    wait_for(lambda: _of(producer, stopped)[-1:] == ["done"])
    assert _of(producer, stopped) == ["published", "cancelled", "requeued", "started", "done"]
    broker.close()


def test_a_queue_without_events_writes_none(start: Callable[..., Running], producer: Producer,
                                            redis_client: redis.Redis) -> None:
    """No events option: the frame stays plain ("0|"), and a whole life (with progress) writes no stream."""
    seen: list[bytes] = []
    producer.publish("q", 1)
    assert redis_client.lindex(K.pending, 0).startswith(b"0|")  # type: ignore[union-attr]
    start(lambda m: (m.progress(1), seen.append(m.body))[0])
    wait_for(lambda: seen == [1])
    wait_for(lambda: redis_client.llen(K.pending) == 0)
    assert not redis_client.exists(K.events) and list(producer.events("q")) == []


def test_the_stream_is_capped_at_about_events_max(start: Callable[..., Running], producer: Producer,
                                                  redis_client: redis.Redis, redis_url: str) -> None:
    """events_max 50: 600 messages' 1,200 events leave the stream near 50 entries, not all of them."""
    _declared(redis_url, events_max=50)
    producer.publish_many("q", list(range(600)))
    assert redis_client.lindex(K.pending, 0).startswith(b"0:0:0:0:50|")  # type: ignore[union-attr]
    start(lambda m: None, events=True, events_max=50, prefetch=16, concurrency=4)
    wait_for(lambda: redis_client.llen(K.pending) == 0 and _all_acked(redis_client))
    assert 50 <= redis_client.xlen(K.events) <= 250  # MAXLEN ~ trims whole nodes of 100 entries


def _all_acked(client: redis.Redis) -> bool:
    """No frame left in any consumer's processing list of q."""
    return all(client.llen(K.processing(cid.decode())) == 0 for cid in client.hkeys(K.consumers))


def test_partitions_are_merged_and_each_messages_events_stay_in_order(
        start: Callable[..., Running], producer: Producer, redis_url: str) -> None:
    """Three partitions: events() reads all three streams; every message has published, started, done in order."""
    start(lambda m: None, events=True, partitions=3, consumers=1)
    _until_declared(producer)
    wait_for(lambda: clients.declared_now(producer, "q")[0] == 3)
    ids = [producer.publish("q", i, partition_key=f"k{i}") for i in range(12)]
    wait_for(lambda: sum(e.event == "done" for e in producer.events("q")) == 12)
    events = list(producer.events("q"))
    assert {e.queue for e in events} == set(partition_names("q", 3))
    for mid in ids:
        assert [e.event for e in events if e.message_id == mid] == ["published", "started", "done"]
    assert [e.at_ms for e in events] == sorted(e.at_ms for e in events)


def test_since_reads_after_a_cursor_a_time_or_from_now(start: Callable[..., Running], producer: Producer,
                                                       redis_url: str) -> None:
    """since=an event, its cursor, unix seconds, "now": each reads what comes after it."""
    _declared(redis_url)
    first = producer.publish("q", 1)
    [published] = list(producer.events("q"))
    second = producer.publish("q", 2)
    assert [e.message_id for e in producer.events("q", since=published)] == [second]
    assert [e.message_id for e in producer.events("q", since=published.cursor)] == [second]
    assert [e.message_id for e in producer.events("q", since=published.at_ms / 1000)][:1] == [first]
    assert list(producer.events("q", since=time.time() + 3600)) == []
    assert list(producer.events("q", since="now")) == []


def test_follow_waits_for_new_events_without_polling(new_producer: Callable[..., Producer], producer: Producer, redis_url: str) -> None:
    """follow=True: the iterator blocks in XREAD and yields an event published after it started."""
    _declared(redis_url)
    got: list[str] = []

    def follow() -> None:
        with new_producer(redis_url) as p:
            for e in p.events("q", since="now", follow=True):
                got.append(e.message_id)
                return
    t = threading.Thread(target=follow, daemon=True)
    t.start()
    wait_for(lambda: _blocked_in_xread(redis_url))
    mid = producer.publish("q", 1)
    t.join(10)
    assert got == [mid]


def _blocked_in_xread(url: str) -> bool:
    """Whether some client of the test's Redis is blocked in XREAD now."""
    client = client_for(url)
    try:
        return any("b" in c.get("flags", "") and "xread" in c.get("cmd", "")
                   for s in servers_of(client) for c in s.client_list())
    finally:
        client.close()


@pytest.mark.parametrize("since", [float("nan"), -1, True, "abc", "1-2-3", "-5", 10**30, "9" * 25, [], b"0-0"])
def test_hostile_since_is_a_message_error(producer: Producer, since: Any) -> None:
    """NaN, negative, a boolean, junk text, huge numbers: MessageError naming since, before any read."""
    with pytest.raises(MessageError, match="since"):
        producer.events("q", since=since)


def test_garbage_in_the_stream_reads_as_malformed_events(producer: Producer, redis_client: redis.Redis,
                                                         redis_url: str) -> None:
    """Entries someone else wrote (no id, an unknown event, bytes not UTF-8, bad attempts) are "malformed";
    the good entries around them read as they are."""
    _declared(redis_url)
    redis_client.xadd(K.events, {"junk": "x"})
    redis_client.xadd(K.events, {"event": "exploded", "id": "a", "attempts": "0"})
    redis_client.xadd(K.events, {"event": b"\xff\xfe", "id": b"\x00\x1b[31m", "attempts": "-1"})
    redis_client.xadd(K.events, {"event": "done", "id": "b", "attempts": "9" * 30, "data": "{"})
    redis_client.xadd(K.events, {"event": "dead", "id": "c", "attempts": "1",
                                 "data": '{"reason":"failed: redis://:hunter2@db:6379/0 down"}'})
    mid = producer.publish("q", 1)
    events = list(producer.events("q"))
    assert [e.event for e in events] == ["malformed"] * 4 + ["dead", "published"] and events[-1].message_id == mid
    assert "hunter2" not in events[4].data["reason"] and events[4].data["reason"].startswith("failed: redis://")


@pytest.mark.parametrize("junk", [b"abc", b"-5", b"9" * 50, b"1e3", b"\xff\xfe", b"", b"0"])
def test_junk_in_the_declared_events_max_leaves_publishes_plain(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis,
                                                               junk: bytes) -> None:
    """An events_max no consumer wrote (junk, negative, too long, 0) reads as none: publishes stay plain."""
    redis_client.hset(K.options, mapping={"result_ttl": b"0", "events_max": junk})
    with new_producer(redis_url) as p:
        p.publish("q", 1)
        assert redis_client.lindex(K.pending, 0).startswith(b"0|")  # type: ignore[union-attr]
        assert list(p.events("q")) == [] and redis_client.llen(K.pending) == 1


@pytest.mark.parametrize("reply", [
    [[b"k", [(b"1-0", {b"event": b"done"})]]], {b"k": [(b"1-0", {b"event": b"done"})]},
    {b"k": [[(b"1-0", {b"event": b"done"})]]}])
def test_xread_replies_of_every_shape_read_alike(reply: Any) -> None:
    """XREAD as RESP2 lists, a RESP3 dict, or a RESP3 dict of wrapped lists: the same entries by key."""
    from smqsup.store.core.event_entries import by_key
    assert by_key(reply) == {"k": [(b"1-0", {b"event": b"done"})]} and by_key(None) == by_key([]) == {}


@pytest.mark.parametrize("reply, newest", [
    ([b"m", b"1700000000000"], 1.7e12), ([[b"m", 1.7e12]], 1.7e12), ([(b"m", 5.0)], 5.0), ([], 0.0),
    (None, 0.0), ([b"m", b"junk"], 0.0), ([b"m", b"nan"], 0.0), ([[b"m"]], 0.0), (ValueError("x"), 0.0)])
def test_the_newest_cancel_is_read_from_either_reply_shape(reply: Any, newest: float) -> None:
    """ZREVRANGE WITHSCORES as RESP2 (flat, bytes) or RESP3 (pairs, floats) gives the score; junk gives 0."""
    from smqsup.store.ops.registry import _newest
    assert _newest(reply) == newest


def test_a_stream_of_the_wrong_type_costs_events_not_messages(start: Callable[..., Running], producer: Producer,
                                                              redis_client: redis.Redis, redis_url: str) -> None:
    """The stream key holding a string: messages are published, handled and acked; events() is a BrokerError."""
    _declared(redis_url)
    redis_client.set(K.events, "junk")
    seen: list[Any] = []
    start(lambda m: (m.progress(0.5), seen.append(m.body))[1], events=True)
    producer.publish_many("q", [1, 2])
    wait_for(lambda: sorted(seen) == [1, 2])
    wait_for(lambda: redis_client.llen(K.pending) == 0 and _all_acked(redis_client))
    with pytest.raises(BrokerError, match="events"):
        list(producer.events("q"))


def test_async_producer_reads_and_follows_events(start: Callable[..., Running], redis_url: str) -> None:
    """AsyncProducer.events: an async iterator over the same events; follow=True awaits the next one; a bad
    since raises MessageError before the iteration."""
    from smqsup import AsyncProducer
    _declared(redis_url)
    start(lambda m: None, events=True)

    async def work() -> tuple[list[str], list[str]]:
        async with AsyncProducer(redis_url) as p:
            mid = await p.publish("q", 1)
            async def done() -> bool:
                return any([e.event == "done" async for e in p.events("q")])
            await until(done)
            read = [e.event async for e in p.events("q") if e.message_id == mid]
            with pytest.raises(MessageError, match="since"):
                p.events("q", since=float("nan"))
            followed: list[str] = []

            async def follow() -> None:
                async for e in p.events("q", since="now", follow=True):
                    followed.append(e.message_id)
                    return
            task = asyncio.ensure_future(follow())
            await until(lambda: _blocked_in_xread(redis_url))
            later = await p.publish("q", 2)
            await asyncio.wait_for(task, 10)
            return read, [m for m in followed if m == later]
    read, followed = asyncio.run(work())
    assert read == ["published", "started", "done"] and len(followed) == 1
