"""Publish options and handler verdicts in one process, against a real
redis-server: delay and at, priority, dedup keys, ttl, Reject and Retry, and
pause as a consumer sees it."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import Reject, Retry, deadletter, message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from tests.support.helpers import holds, node_of, redis_ms, wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]

K = QueueKeys(NS, "q")


def recorder(seen: list[tuple[Any, int]], client: redis.Redis) -> Callable[[Any], None]:
    """A handler recording (body, Redis time in ms at its start)."""
    lock = threading.Lock()

    def handle(msg: Any) -> None:
        with lock:
            seen.append((msg.body, redis_ms(client)))
    return handle


def test_a_delayed_message_is_not_handled_before_it_is_due(start: Callable[..., Running], producer: Producer,
                                                          redis_client: redis.Redis) -> None:
    """delay=0.6: nothing before the Redis clock says it is due, then handled soon after."""
    seen: list[tuple[Any, int]] = []
    start(recorder(seen, redis_client))
    before = redis_ms(redis_client)
    producer.publish("q", "later", delay=0.6)
    assert redis_client.zcard(K.scheduled) == 1
    wait_for(lambda: seen, timeout_s=5)
    assert seen[0][1] >= before + 600
    assert seen[0][1] <= before + 600 + 1000


@pytest.mark.sync_client_only("the consumers' order and timing; the producer only publishes (its frames: test_async_producer)")
def test_due_messages_come_out_in_due_order_and_at_in_the_past_is_at_once(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Published in reverse due order, handled in due order; an `at` in the past goes straight to pending."""
    now_s = redis_ms(redis_client) / 1000
    # Due a second apart, from 2 s on: on a loaded machine the publishes below
    # once took longer than the 0.3 s the earliest was due in (it went to pending).
    for i, d in enumerate([4.0, 3.0, 2.0]):
        producer.publish("q", f"d{i}", at=dt.datetime.fromtimestamp(now_s + d, dt.timezone.utc))
    producer.publish("q", "past", at=now_s - 60)
    producer.publish("q", "epoch", at=0)
    assert redis_client.llen(K.pending) == 2 and redis_client.zcard(K.scheduled) == 3
    seen: list[tuple[Any, int]] = []
    start(recorder(seen, redis_client))
    wait_for(lambda: len(seen) == 5, timeout_s=10)
    assert [b for b, _ in seen] == ["past", "epoch", "d2", "d1", "d0"]


@pytest.mark.sync_client_only("the consumers' order and timing; the producer only publishes (its frames: test_async_producer)")
def test_the_highest_priority_ready_message_goes_first_fifo_within_a_level(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """1,000 of priority 0 waiting, then 100 of priority 9 and 10 of 5: 9s, then 5s, then 0s, each in order."""
    producer.publish_many("q", [("p0", i) for i in range(1000)])
    for i in range(100):
        producer.publish("q", ("p9", i), priority=9)
    producer.publish_many("q", [("p5", i) for i in range(10)], priority=5)
    seen: list[tuple[Any, int]] = []
    start(recorder(seen, redis_client))
    wait_for(lambda: len(seen) == 1110, timeout_s=30)
    bodies = [tuple(b) for b, _ in seen]
    assert bodies == [("p9", i) for i in range(100)] + [("p5", i) for i in range(10)] + \
        [("p0", i) for i in range(1000)]


#: How long the woken consumer's BLMOVE blocks, in s.
BLOCK_S = 1.0


def _blmove_calls(node: Any) -> int:
    """BLMOVE calls the server has started (Redis counts a blocking call when it blocks)."""
    return int(node.info("commandstats").get("cmdstat_blmove", {}).get("calls", 0))


@pytest.mark.sync_client_only("the consumers' order and timing; the producer only publishes (its frames: test_async_producer)")
def test_a_priority_message_wakes_a_consumer_blocked_on_an_empty_queue(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """With nothing else ready a priority message goes to the pending list, so a blocked consumer gets it at once.

    The publish follows a fresh BLMOVE (INFO commandstats counts the call as it blocks), so a consumer that
    is not woken gets the message only at that BLMOVE's timeout, BLOCK_S later: half that tells the two
    apart with room for a loaded machine."""
    seen: list[tuple[Any, int]] = []
    start(recorder(seen, redis_client), fetch_block_s=BLOCK_S)
    node = node_of(redis_client, K.pending)
    wait_for(lambda: node.info("clients")["blocked_clients"] >= 1, timeout_s=5)
    calls = _blmove_calls(node)
    wait_for(lambda: _blmove_calls(node) > calls, timeout_s=2 * BLOCK_S + 5, interval_s=0.002)
    before = redis_ms(redis_client)
    producer.publish("q", "urgent", priority=7)
    wait_for(lambda: seen, timeout_s=5)
    assert seen[0][0] == "urgent" and seen[0][1] - before < BLOCK_S * 1000 / 2


def test_a_retried_priority_message_keeps_its_priority(start: Callable[..., Running], producer: Producer,
                                                       redis_client: redis.Redis) -> None:
    """A priority-9 message that fails once is retried ahead of the priority-0 backlog."""
    producer.publish_many("q", [("p0", i) for i in range(200)])
    producer.publish("q", "flaky", priority=9)
    seen: list[Any] = []

    def handle(msg: Any) -> None:
        seen.append(msg.body)
        if msg.body == "flaky" and msg.attempts == 0:
            raise ValueError("once")
    start(handle, retry_delay_s=0)
    wait_for(lambda: len(seen) == 202, timeout_s=20)
    assert seen[:2] == ["flaky", "flaky"]


def test_a_delayed_retry_becomes_due_with_its_priority(redis_url: str, producer: Producer, redis_client: redis.Redis) -> None:
    """A priority-9 frame retried with a delay keeps its head, and the promotion puts it before the backlog."""
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    producer.publish("q", "urgent", priority=9)
    took = broker.messages.take("q", "c")
    assert took.next_frame is not None and took.next_frame.startswith(b"0:9:0|")
    producer.publish_many("q", ["a", "b"])
    broker.messages.nack("q", "c", took.next_frame, retry_threshold=3, delay_ms=1, meta='{"reason":"x"}', fetch_next=False)
    assert redis_client.zrange(K.delayed, 0, -1)[0].startswith(b"1:9:0|")
    wait_for(lambda: broker.messages.promote("q").moved == 1, timeout_s=5)
    assert message.decode(broker.messages.take("q", "c").next_frame or b"").body == "urgent"


def test_a_dedup_key_queues_one_message_and_returns_its_id(producer: Producer, redis_client: redis.Redis) -> None:
    """The same key twice: one message, both calls return its id; another key queues another."""
    first = producer.publish("q", {"n": 1}, dedup_key="order-42")
    again = producer.publish("q", {"n": 2}, dedup_key="order-42")
    other = producer.publish("q", {"n": 3}, dedup_key="order-43")
    assert again == first and other != first
    assert redis_client.llen(K.pending) == 2
    assert redis_client.hget(K.counters, "deduplicated") == b"1"
    assert 0 < redis_client.pttl(K.dedup("order-42")) <= 86_400_000


def test_publish_many_dedup_keys_one_per_body_or_one_for_all(producer: Producer, redis_client: redis.Redis) -> None:
    """A list of keys dedups body by body; one key for all queues only the first body."""
    ids = producer.publish_many("q", ["a", "b", "c", "d"], dedup_key=["k1", "k2", "k1", None])
    assert ids[2] == ids[0] and len(set(ids)) == 3
    same = producer.publish_many("q", ["x", "y"], dedup_key="k9")
    assert same[0] == same[1]
    assert redis_client.llen(K.pending) == 4


def test_a_dedup_key_is_free_again_after_its_ttl(producer: Producer, redis_client: redis.Redis) -> None:
    """dedup_ttl=0.3: once it has passed, the key queues a new message."""
    first = producer.publish("q", 1, dedup_key="k", dedup_ttl=0.3)
    wait_for(lambda: not redis_client.exists(K.dedup("k")), timeout_s=5)
    assert producer.publish("q", 2, dedup_key="k") != first
    assert redis_client.llen(K.pending) == 2


def test_a_dedup_key_holds_while_its_message_waits_is_handled_or_dies(redis_url: str,
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Acked or dead-lettered, the key still holds; purging the dead letter frees it."""
    def handle(msg: Any) -> None:
        if msg.body == "bad":
            raise Reject("no")
    start(handle)
    ok = producer.publish("q", "good", dedup_key="g")
    bad = producer.publish("q", "bad", dedup_key="b")
    wait_for(lambda: redis_client.hget(K.counters, "acked") == b"1" and redis_client.llen(K.dead) == 1, timeout_s=5)
    assert producer.publish("q", "good", dedup_key="g") == ok
    assert producer.publish("q", "bad", dedup_key="b") == bad
    from smqsup.views import deadletters
    assert deadletters.purge(Broker(redis_url), "q", [bad]) == 1
    assert producer.publish("q", "bad", dedup_key="b") != bad
    assert producer.publish("q", "good", dedup_key="g") == ok


@pytest.mark.sync_client_only("the purge's freeing of dedup keys; the producer only publishes")
def test_a_whole_purge_frees_the_dedup_keys_of_its_messages(redis_url: str, producer: Producer, redis_client: redis.Redis) -> None:
    """Purging every dead letter frees each one's key, and leaves another message's key alone."""
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    ids = producer.publish_many("q", list(range(2500)), dedup_key=[f"k{i}" for i in range(2500)])
    for _ in ids:
        took = broker.messages.take("q", "c")
        assert took.next_frame is not None
        broker.messages.nack("q", "c", took.next_frame, retry_threshold=-1, delay_ms=0, meta='{"reason":"x"}',
                             fetch_next=False)
    kept = producer.publish("q", "waiting", dedup_key="kept")
    from smqsup.views import deadletters
    assert deadletters.purge(broker, "q", None) == 2500
    assert redis_client.llen(K.dead) == 0 and not redis_client.exists(K.dedup("k7"), K.dedup("k2499"))
    assert redis_client.get(K.dedup("kept")) == kept.encode()
    assert not [k for k in redis_client.scan_iter(f"{K.dead}:purging:*")]


def test_a_message_past_its_ttl_is_dead_lettered_as_expired_never_handled(redis_url: str,
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """ttl passes while the queue is paused: at resume it is dead-lettered 'expired', the handler never sees it."""
    broker = Broker(redis_url)
    broker.queues.pause("q", "test")
    seen: list[Any] = []
    start(lambda m: seen.append(m.body))
    producer.publish("q", "stale", ttl=0.2)
    producer.publish("q", "fresh", ttl=60)
    deadline = redis_ms(redis_client) + 250
    wait_for(lambda: redis_ms(redis_client) > deadline, timeout_s=5)
    broker.queues.resume("q")
    wait_for(lambda: seen == ["fresh"], timeout_s=5)
    [entry] = broker.contents.dead_letters("q")
    d = deadletter.DeadLetter(entry)
    assert d.reason == "expired" and d.message() is not None and d.message().body == "stale"  # type: ignore[union-attr]
    assert redis_client.hget(K.counters, "expired") == b"1"


def test_an_ack_that_takes_a_frame_with_an_expiry_from_the_list_screens_it(redis_url: str,
        producer: Producer, redis_client: redis.Redis) -> None:
    """ack.lua's hot path hands a frame that is not plain (here: with an expiry) to fetch_next: expired ones
    are dead-lettered, the next live frame is returned with its head intact, an ack past the last fetches
    nothing."""
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    producer.publish("q", "first")
    took = broker.messages.take("q", "c")
    assert took.next_frame is not None
    producer.publish("q", "stale-1", ttl=0.05)
    producer.publish("q", "stale-2", ttl=0.05)
    producer.publish("q", "live", ttl=60)
    assert not redis_client.exists(K.priority, K.paused)  # the hot path's condition
    deadline = redis_ms(redis_client) + 100
    wait_for(lambda: redis_ms(redis_client) > deadline, timeout_s=5)
    acked = broker.messages.ack("q", "c", took.next_frame, fetch_next=True)
    assert acked.acked and acked.next_frame is not None and acked.next_frame.startswith(b"0:0:")
    assert message.decode(acked.next_frame).body == "live"
    assert [deadletter.DeadLetter(e).reason for e in broker.contents.dead_letters("q")] == ["expired", "expired"]
    assert redis_client.lrange(K.processing("c"), 0, -1) == [acked.next_frame]
    last = broker.messages.ack("q", "c", acked.next_frame, fetch_next=True)
    assert last.acked and last.next_frame is None and last.registered and not last.paused
    assert redis_client.hget(K.counters, "expired") == b"2"


def test_a_scheduled_message_whose_ttl_passes_before_it_is_due_is_expired(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """delay 0.5 s with ttl 0.1 s: dead-lettered as expired when due, never handled."""
    seen: list[Any] = []
    start(lambda m: seen.append(m.body))
    producer.publish("q", "never", delay=0.5, ttl=0.1)
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=5)
    assert seen == [] and deadletter.DeadLetter(redis_client.lindex(K.dead, 0)).reason == "expired"


def test_reject_dead_letters_at_once_whatever_the_attempts(start: Callable[..., Running], producer: Producer,
                                                           redis_client: redis.Redis) -> None:
    """raise Reject: one delivery, a dead letter 'rejected: <reason>'."""
    deliveries: list[int] = []

    def handle(msg: Any) -> None:
        deliveries.append(msg.attempts)
        raise Reject("no such customer")
    start(handle, retry_threshold=5)
    producer.publish("q", 1)
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=5)
    holds(lambda: deliveries == [0], 0.3)
    assert deadletter.DeadLetter(redis_client.lindex(K.dead, 0)).reason == "rejected: no such customer"
    assert redis_client.hget(K.counters, "rejected") == b"1"


@pytest.mark.sync_client_only("the consumers' order and timing; the producer only publishes (its frames: test_async_producer)")
def test_retry_uses_its_own_delay_and_the_queue_threshold(start: Callable[..., Running], producer: Producer,
                                                          redis_client: redis.Redis) -> None:
    """Retry(delay=0.3) with retry_threshold 2: three deliveries, each >= 0.3 s apart, then dead-lettered."""
    times: list[int] = []

    def handle(msg: Any) -> None:
        times.append(redis_ms(redis_client))
        raise Retry(delay=dt.timedelta(milliseconds=300))
    start(handle, retry_threshold=2, retry_delay_s=3600)
    producer.publish("q", 1)
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=10)
    assert len(times) == 3 and all(b - a >= 300 for a, b in zip(times, times[1:]))
    assert deadletter.DeadLetter(redis_client.lindex(K.dead, 0)).reason.startswith("Retry: ")


def test_pause_stops_taking_and_resume_goes_on(redis_url: str, start: Callable[..., Running], producer: Producer,
                                               redis_client: redis.Redis) -> None:
    """Paused: published messages wait, none is handled; resumed: all are handled."""
    broker = Broker(redis_url)
    seen: list[Any] = []
    start(lambda m: seen.append(m.body))
    producer.publish("q", "before")
    wait_for(lambda: seen == ["before"], timeout_s=5)
    assert broker.queues.pause("q", "test") and not broker.queues.pause("q", "test")
    for i in range(5):
        producer.publish("q", i)
    # A consumer blocked in BLMOVE when the pause came is handed message 0 by Redis at its
    # publish, and gives it back unhandled one round trip later (screen.lua).
    wait_for(lambda: redis_client.llen(K.pending) == 5, timeout_s=5, message="message 0 was not given back")
    holds(lambda: seen == ["before"] and redis_client.llen(K.pending) == 5, 1.0)
    assert broker.queues.resume("q") and not broker.queues.resume("q")
    wait_for(lambda: len(seen) == 6, timeout_s=5)
    assert seen == ["before", 0, 1, 2, 3, 4]


def test_the_pending_listing_follows_the_order_consumers_take(redis_url: str, producer: Producer, redis_client: redis.Redis) -> None:
    """browse.listing('pending') gives exactly the order take.lua hands the messages out."""
    from smqsup.views import browse
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    for body, prio in [("a9", 9), ("b5", 5), ("c0", 0), ("d9", 9), ("e0", 0), ("f5", 5)]:
        producer.publish("q", body, priority=prio)
    listed = [r["preview"] for r in browse.listing(broker, "q", "pending", 100)]
    taken = []
    while (frame := broker.messages.take("q", "c").next_frame) is not None:
        taken.append(message.decode(frame).body)
    assert listed == taken == ["a9", "d9", "b5", "f5", "c0", "e0"]


@pytest.mark.sync_client_only("the consumers' order and timing; the producer only publishes (its frames: test_async_producer)")
def test_a_burst_of_priority_messages_into_an_empty_queue_wakes_every_blocked_consumer(
        redis_url: str, producer: Producer, redis_client: redis.Redis) -> None:
    """Four idle consumers, four priority-5 messages in one call: all four start at once, not one by one."""
    from smqsup.config.model import QueueConfig
    started: list[int] = []
    lock = threading.Lock()
    release = threading.Event()

    def handle(msg: Any) -> None:
        with lock:
            started.append(redis_ms(redis_client))
        release.wait(5)
    runs = [Running(redis_url, QueueConfig(name="q", handler="x:y"), handle) for _ in range(4)]
    try:
        wait_for(lambda: node_of(redis_client, K.pending).info("clients")["blocked_clients"] >= 4, timeout_s=5)
        producer.publish_many("q", [1, 2, 3, 4], priority=5)
        wait_for(lambda: len(started) == 4, timeout_s=0.5, message="a consumer waited for its fetch to time out")
    finally:
        release.set()
        for r in runs:
            r.stop()


def test_a_requeued_dead_letter_keeps_its_priority(redis_url: str, producer: Producer, redis_client: redis.Redis) -> None:
    """A priority-9 dead letter requeued behind a priority-0 backlog is taken first."""
    from smqsup.views import deadletters
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    producer.publish("q", "urgent", priority=9)
    took = broker.messages.take("q", "c")
    assert took.next_frame is not None
    broker.messages.nack("q", "c", took.next_frame, retry_threshold=-1, delay_ms=0, meta='{"reason":"x"}', fetch_next=False)
    producer.publish_many("q", ["low0", "low1"])
    producer.publish("q", "p5", priority=5)
    assert deadletters.requeue(broker, "q", None) == 1
    taken = []
    while (frame := broker.messages.take("q", "c").next_frame) is not None:
        taken.append(message.decode(frame).body)
    assert taken == ["urgent", "p5", "low0", "low1"]
