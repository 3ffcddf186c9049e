"""Tracked messages (result_ttl): results, state and progress written by the
scripts that move a message, read by the producer, waited for without
polling; on one Redis and on the Redis Cluster, partitioned too; from the
Producer and from the AsyncProducer (tests/support/clients.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import MessageFailed, Reject, ResultUnknown
from smqsup.client.producer import Producer
from smqsup.errors import BrokerError, MessageError
from smqsup.framing import frame_head, peek_id
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from tests.support.helpers import holds, redis_ms, servers_of, wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients("cluster")]

K = QueueKeys(NS, "q")


def test_a_sync_handlers_return_value_is_the_result(start: Callable[..., Running], producer: Producer) -> None:
    """result() returns what the handler returned: a dict, None, a list; state says done."""
    start(lambda m: m.body["x"] * 2 if m.body.get("x") is not None else m.body.get("v"))
    ids = [producer.publish("q", {"x": 21}, result_ttl=60), producer.publish("q", {"v": None}, result_ttl=60),
           producer.publish("q", {"v": [1, {"a": "é"}]}, result_ttl=60)]
    assert [producer.result("q", mid, timeout=10) for mid in ids] == [42, None, [1, {"a": "é"}]]
    assert producer.state("q", ids[0]) == "done"


def test_async_and_threaded_handlers_give_results_too(start: Callable[..., Running], producer: Producer) -> None:
    """An async handler at concurrency 10 and a sync one on threads at concurrency 4 return results."""
    async def handle(m: Any) -> Any:
        await asyncio.sleep(0.01)
        return {"twice": m.body * 2}
    start(handle, concurrency=10)
    start(lambda m: {"twice": m.body * 2}, name="t", concurrency=4)
    ids = [producer.publish("q", i, result_ttl=60) for i in range(30)]
    tids = [producer.publish("t", i, result_ttl=60) for i in range(30)]
    assert [producer.result("q", mid, timeout=10) for mid in ids] == [{"twice": 2 * i} for i in range(30)]
    assert [producer.result("t", mid, timeout=10) for mid in tids] == [{"twice": 2 * i} for i in range(30)]


def test_fifty_waiters_on_one_message_all_get_its_result(new_producer: Callable[..., Producer], start: Callable[..., Running], producer: Producer,
                                                         redis_url: str) -> None:
    """50 threads wait on one message published before any consumer runs; each gets the result."""
    mid = producer.publish("q", "go", result_ttl=60)
    got: list[Any] = []
    lock = threading.Lock()

    def wait() -> None:
        with new_producer(redis_url) as p:
            value = p.result("q", mid, timeout=20)
        with lock:
            got.append(value)
    threads = [threading.Thread(target=wait) for _ in range(50)]
    for t in threads:
        t.start()
    wait_for(lambda: producer.state("q", mid) == "waiting")
    start(lambda m: "answer")
    for t in threads:
        t.join(30)
    assert got == ["answer"] * 50


def test_failures_rejects_and_expiry_raise_message_failed_with_the_reason(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A handler that keeps failing, a Reject and an expired ttl each raise MessageFailed with its reason."""
    def handle(m: Any) -> None:
        if m.body == "reject":
            raise Reject("bad order")
        raise ValueError("boom")
    failing = producer.publish("q", "fail", result_ttl=60)
    rejected = producer.publish("q", "reject", result_ttl=60)
    expired = producer.publish("q", "late", result_ttl=60, ttl=0.05)
    [late] = [f for f in redis_client.lrange(K.pending, 0, -1) if peek_id(f) == expired]
    due_ms = frame_head(late).expires_ms or 0
    wait_for(lambda: redis_ms(redis_client) > due_ms)  # its ttl passes before any consumer exists
    start(handle, retry_threshold=1)
    with pytest.raises(MessageFailed) as failed:
        producer.result("q", failing, timeout=10)
    assert "boom" in failed.value.reason and failed.value.attempts == 2
    with pytest.raises(MessageFailed) as rej:
        producer.result("q", rejected, timeout=10)
    assert rej.value.reason == "rejected: bad order"
    with pytest.raises(MessageFailed) as exp:
        producer.result("q", expired, timeout=10)
    assert exp.value.reason == "expired"
    assert producer.state("q", failing) == "dead"


def test_a_result_that_is_not_json_fails_the_attempt_with_a_clear_reason(
        start: Callable[..., Running], producer: Producer) -> None:
    """A set, NaN, a lone surrogate and a 2 MiB string each fail the attempt, naming why."""
    bad = {"set": {1}, "nan": float("nan"), "surrogate": "\ud800", "huge": "x" * (2 * 1024 * 1024),
           "deep": [[[[[]]]]]}
    deep: Any = []
    for _ in range(200):
        deep = [deep]
    bad["deep"] = deep
    start(lambda m: bad[m.body], retry_threshold=0)
    reasons = {}
    for name in bad:
        mid = producer.publish("q", name, result_ttl=60)
        with pytest.raises(MessageFailed) as failed:
            producer.result("q", mid, timeout=10)
        reasons[name] = failed.value.reason
    assert "not JSON-serialisable" in reasons["set"] and "not JSON-serialisable" in reasons["nan"]
    assert "lone surrogate" in reasons["surrogate"]
    assert "exceeds the limit" in reasons["huge"] and "nested deeper" in reasons["deep"]


def test_state_goes_scheduled_active_done(start: Callable[..., Running], producer: Producer) -> None:
    """A delayed message is scheduled, then (promoted, taken) active while its handler runs, then done."""
    gate = threading.Event()
    start(lambda m: gate.wait(10) and "ok")
    mid = producer.publish("q", "x", result_ttl=60, delay=0.5)
    assert producer.state("q", mid) == "scheduled"
    wait_for(lambda: producer.state("q", mid) == "active")
    with pytest.raises(TimeoutError):
        producer.result("q", mid, timeout=0.1)
    gate.set()
    assert producer.result("q", mid, timeout=10) == "ok"


def test_progress_is_readable_at_once(start: Callable[..., Running], producer: Producer) -> None:
    """A handler's progress() is what progress() reads while it runs; untracked, progress() records nothing."""
    gate, said = threading.Event(), []

    def handle(m: Any) -> str:
        said.append(m.progress({"rows": 1200, "of": 5000}))
        gate.wait(10)
        return "done"
    start(handle)
    mid = producer.publish("q", 1, result_ttl=60)
    wait_for(lambda: producer.progress("q", mid) == {"rows": 1200, "of": 5000})
    gate.set()
    assert producer.result("q", mid, timeout=10) == "done"
    producer.publish("q", 2)
    wait_for(lambda: len(said) == 2)
    assert said == [True, False]


def test_hostile_progress_values_are_refused_in_the_handler(producer: Producer, start: Callable[..., Running]) -> None:
    """NaN, a 20 KiB value, a lone surrogate: progress() raises MessageError; the message still ends done."""
    errors: list[str] = []

    def handle(m: Any) -> str:
        for value in (float("nan"), "y" * 20_000, "\udfff", {1, 2}):
            try:
                m.progress(value)
            except MessageError as exc:
                errors.append(str(exc))
        return "fine"
    start(handle)
    mid = producer.publish("q", 1, result_ttl=60)
    assert producer.result("q", mid, timeout=10) == "fine"
    assert len(errors) == 4 and "exceeds the limit" in errors[1] and "lone surrogate" in errors[2]


def test_untracked_and_unknown_ids_raise_result_unknown(producer: Producer, start: Callable[..., Running]) -> None:
    """An untracked message, an id never published and a malformed id: ResultUnknown, unknown, MessageError."""
    start(lambda m: "x")
    mid = producer.publish("q", 1)
    for asked in (mid, "no-such-id"):
        with pytest.raises(ResultUnknown):
            producer.result("q", asked, timeout=0.2)
        assert producer.state("q", asked) == "unknown"
    for odd in ("a b", "../x", "x" * 200, "", "\n"):
        with pytest.raises(MessageError):
            producer.state("q", odd)
    for timeout in (-1, float("nan"), True, "3"):
        with pytest.raises(MessageError):
            producer.result("q", mid, timeout=timeout)  # type: ignore[arg-type]


def test_result_ttl_passes_and_the_result_is_gone(start: Callable[..., Running], producer: Producer,
                                                  redis_client: redis.Redis) -> None:
    """result_ttl 2: readable for those 2 s (measured from the publish: the end came later), unknown once they
    passed, and its fields are removed."""
    start(lambda m: "short")
    published = time.monotonic()
    mid = producer.publish("q", 1, result_ttl=2)
    assert producer.result("q", mid, timeout=10) == "short"
    # Each look runs a tracked end too (an end prunes what is past its time).
    holds(lambda: producer.publish("q", 0, result_ttl=60) and producer.result("q", mid, timeout=0) == "short",
          published + 1.5 - time.monotonic(), message="the result went before its result_ttl")
    wait_for(lambda: producer.state("q", mid) == "unknown", timeout_s=5)
    with pytest.raises(ResultUnknown):
        producer.result("q", mid, timeout=0)
    producer.publish("q", 2, result_ttl=60)  # an end prunes what is past its time
    wait_for(lambda: not redis_client.hexists(K.tracked, mid) and redis_client.zscore(K.tracked_expiry, mid) is None)


def test_the_queue_option_result_ttl_tracks_plain_publishes(new_producer: Callable[..., Producer], redis_url: str, start: Callable[..., Running]) -> None:
    """A queue whose consumers say result_ttl tracks what any producer publishes without it; 0 opts out."""
    start(lambda m: m.body + 1, result_ttl_s=30)
    with new_producer(redis_url) as p:
        wait_for(lambda: Broker(redis_url, NS).queues.result_ttl("q") == 30)
        mid = p.publish("q", 1)
        assert p.result("q", mid, timeout=10) == 2
        many = p.publish_many("q", [10, 20])
        assert [p.result("q", m, timeout=10) for m in many] == [11, 21]
        untracked = p.publish("q", 5, result_ttl=0)
        with pytest.raises(ResultUnknown):
            p.result("q", untracked, timeout=0.5)


def test_results_on_a_partitioned_queue(start: Callable[..., Running], producer: Producer, redis_url: str) -> None:
    """Three partitions: each message's result is found in its own partition."""
    start(lambda m: m.body * 3, partitions=3)
    ids = [producer.publish("q", i, result_ttl=60) for i in range(12)]
    assert [producer.result("q", mid, timeout=10) for mid in ids] == [3 * i for i in range(12)]


def test_garbage_in_the_tracking_keys_costs_records_not_messages(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A tracking hash holding a string: messages are still handled and acked; a record holding junk reads unknown."""
    redis_client.set(K.tracked, "junk")
    seen: list[Any] = []
    start(lambda m: seen.append(m.body))
    producer.publish_many("q", [1, 2], result_ttl=60)
    wait_for(lambda: len(seen) == 2)
    wait_for(lambda: redis_client.llen(K.pending) == 0)
    redis_client.delete(K.tracked)
    redis_client.hset(K.tracked, "odd", "{not json")
    redis_client.hset(K.tracked, "odd2", '{"state":"exploded","attempts":"x"}')
    assert producer.state("q", "odd") == "unknown" and producer.state("q", "odd2") == "unknown"


GARBAGE_RECORDS = [b"{not json", b"\xff\xfe{", b'{"state":"done"', b'{"state":"dead","attempts":', b"null", b"[1, 2]",
                   b'{"attempts": 1, "at_ms": 5}', b'{"state": "exploded"}', b'{"state": 7}', b"",
                   b'{"state":"done","x":"' + b"a" * 4_000_000]


@pytest.mark.parametrize("junk", GARBAGE_RECORDS, ids=lambda junk: repr(junk[:30]))
def test_a_tracked_record_holding_garbage_is_unknown_at_once(producer: Producer, redis_client: redis.Redis,
                                                             junk: bytes) -> None:
    """A record that is not what track.lua writes (not JSON, not UTF-8, cut short, no state, huge): state()
    "unknown", result() and progress() ResultUnknown at once whatever the timeout, cancel() "unknown"."""
    redis_client.hset(K.tracked, "odd", junk)
    assert producer.state("q", "odd") == "unknown"
    for timeout in (0, 3, None):
        began = time.monotonic()
        with pytest.raises(ResultUnknown):
            producer.result("q", "odd", timeout=timeout)
        assert time.monotonic() - began < 2
    with pytest.raises(ResultUnknown):
        producer.progress("q", "odd")
    assert producer.cancel("q", "odd") == "unknown" and redis_client.zcard(K.cancel) == 0


def test_a_tracking_hash_of_the_wrong_type_is_unknown_at_once(producer: Producer, redis_client: redis.Redis) -> None:
    """The tracking hash a list: state() "unknown", result(timeout=None) ResultUnknown at once, cancel() "unknown"."""
    redis_client.rpush(K.tracked, "odd")
    assert producer.state("q", "odd") == "unknown"
    began = time.monotonic()
    with pytest.raises(ResultUnknown):
        producer.result("q", "odd", timeout=None)
    assert time.monotonic() - began < 2 and producer.cancel("q", "odd") == "unknown"


@pytest.mark.parametrize("junk", [b"abc", b"-5", b"9" * 50, b"1e3", b"\xff\xfe", b""])
def test_junk_in_the_declared_options_leaves_publishes_untracked(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis,
                                                                 junk: bytes) -> None:
    """A result_ttl no consumer wrote (junk, negative, too long) reads as 0: publishes go on, untracked."""
    redis_client.hset(K.options, "result_ttl", junk)
    with new_producer(redis_url) as p:
        mid = p.publish("q", 1)
        assert p.state("q", mid) == "unknown" and redis_client.llen(K.pending) == 1


def test_options_and_partition_keys_of_the_wrong_type_cost_no_publish(new_producer: Callable[..., Producer], redis_url: str,
                                                                      redis_client: redis.Redis) -> None:
    """An options key holding a list: publishes go on untracked. A partition count Redis cannot read does
    not hide a declared result_ttl: the publish is tracked, on the queue itself."""
    redis_client.rpush(K.options, "x")
    with new_producer(redis_url) as p:
        assert p.state("q", p.publish("q", 1)) == "unknown"
    redis_client.delete(K.options)
    redis_client.hset(K.options, "result_ttl", "30")
    redis_client.rpush(K.partitions, "x")
    with new_producer(redis_url) as p:
        assert p.state("q", p.publish("q", 2)) == "waiting"


def test_an_expiry_set_of_the_wrong_type_costs_no_message(start: Callable[..., Running], producer: Producer,
                                                          redis_client: redis.Redis) -> None:
    """The expiry set holding a string: messages still end and their results are read (never expiring)."""
    redis_client.set(K.tracked_expiry, "junk")
    start(lambda m: m.body)
    ids = [producer.publish("q", i, result_ttl=1) for i in range(3)]
    assert [producer.result("q", mid, timeout=10) for mid in ids] == [0, 1, 2]
    redis_client.hset(K.tracked, ids[0] + ":r", b"\xff\xfe{")
    assert producer.result("q", ids[0], timeout=0) is None  # undecodable bytes someone wrote: no error


def _subscribed(client: redis.Redis) -> int:
    """Clients subscribed to some channel now, on every server (CLIENT LIST's sub field)."""
    return sum(1 for server in servers_of(client) for c in server.client_list() if int(c.get("sub", 0)) > 0)


def test_thousands_of_waiters_time_out_on_one_subscription(producer: Producer, redis_client: redis.Redis) -> None:
    """1,000 waits in a row and 100 at once on a message nobody handles: each a TimeoutError; the
    row leaves no connection behind, and the 100 share one subscribed connection."""
    mid = producer.publish("q", 1, result_ttl=60)
    before = sum(len(server.client_list()) for server in servers_of(redis_client))
    for _ in range(1000):
        with pytest.raises(TimeoutError):
            producer.result("q", mid, timeout=0.001)
    after = sum(len(server.client_list()) for server in servers_of(redis_client))
    assert after <= before + 2  # (the shared subscription, a pooled connection)
    timeouts: list[bool] = []
    most: list[int] = []

    def wait() -> None:
        try:
            producer.result("q", mid, timeout=1)
        except TimeoutError:
            timeouts.append(True)
    threads = [threading.Thread(target=wait) for _ in range(100)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        most.append(_subscribed(redis_client))
    for t in threads:
        t.join(30)
    assert len(timeouts) == 100 and max(most) <= 1
    wait_for(lambda: _subscribed(redis_client) == 0)  # the last waiter of the channel unsubscribed


def test_a_removed_message_fails_and_a_requeued_dead_letter_is_tracked_again(
        start: Callable[..., Running], producer: Producer, redis_url: str) -> None:
    """An operator's remove: MessageFailed "removed". A dead letter requeued: waiting again, then its new result."""
    from smqsup.views import browse, deadletters
    broker = Broker(redis_url, NS)
    later = producer.publish("q", "later", result_ttl=60, delay=3600)
    assert browse.remove(broker, "q", [later]) == {later: True}
    with pytest.raises(MessageFailed) as removed:
        producer.result("q", later, timeout=0)
    assert removed.value.reason == "removed"
    outcomes = iter([Reject("first"), None])

    def handle(m: Any) -> str:
        if (verdict := next(outcomes)) is not None:
            raise verdict
        return "second"
    start(handle)
    mid = producer.publish("q", "x", result_ttl=60)
    with pytest.raises(MessageFailed):
        producer.result("q", mid, timeout=10)
    assert deadletters.requeue(broker, "q", [mid]) == 1
    assert producer.result("q", mid, timeout=10) == "second"
    broker.close()


def test_a_wait_whose_subscription_is_killed_still_gets_the_result(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """CLIENT KILL of the waits' subscribed connection mid-wait: the waiter subscribes again and gets the result."""
    mid = producer.publish("q", 5, result_ttl=60)
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(producer.result("q", mid, timeout=20)))
    waiter.start()
    wait_for(lambda: _subscribed(redis_client) == 1)
    for server in servers_of(redis_client):
        server.client_kill_filter(_type="pubsub")
    start(lambda m: m.body * 2)
    waiter.join(30)
    assert got == [10]


@pytest.mark.single_node("the ACL is set on the one server")
def test_a_refused_subscribe_is_a_broker_error_at_once(producer: Producer, redis_client: redis.Redis) -> None:
    """An ACL without channels (NOPERM on SUBSCRIBE): result() raises BrokerError naming it, well before its
    timeout, instead of opening a new connection per read until then."""
    redis_client.execute_command("ACL", "SETUSER", "default", "resetchannels")
    mid = producer.publish("q", 1, result_ttl=60)
    began = time.monotonic()
    with pytest.raises(BrokerError, match=r"\(SUBSCRIBE .*\): Redis error: .*no permissions"):
        producer.result("q", mid, timeout=10)
    assert time.monotonic() - began < 5
