"""Batches: messages counted together, whose callbacks fire exactly once when
the last of them ended, on one Redis and on the Redis Cluster; consumers and
collectors in threads (the real processes and signals are in
test_batches_processes.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import Reject
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.ops.batches import parse_id
from tests.support.helpers import holds, wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]


def _deep(depth: int) -> Any:
    """A list nested ``depth`` deep."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


class Calls:
    """The bodies each queue's handler saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, list[Any]] = {}

    def handler(self, then: Callable[[Any], Any] = lambda m: None) -> Callable[[Any], Any]:
        def handle(m: Any) -> Any:
            with self.lock:
                self.seen.setdefault(m.queue, []).append(m.body)
            return then(m)
        return handle

    def of(self, queue: str) -> list[Any]:
        with self.lock:
            return list(self.seen.get(queue, []))


def test_a_batch_fires_its_callbacks_once_with_the_counts(start: Callable[..., Running], producer: Producer) -> None:
    """50 messages on two queues: on_complete and on_success each get one message, with the batch's summary."""
    calls = Calls()
    for q in ("w", "v", "done", "ok"):
        start(calls.handler(), name=q)
    with producer.batch(on_complete=("done", {"album": 7}), on_success=("ok", "yay")) as batch:
        batch.publish_many("w", list(range(30)))
        for i in range(20):
            batch.publish("v", i, priority=3)
    wait_for(lambda: calls.of("done") and calls.of("ok"), timeout_s=15)
    [summary] = calls.of("done")
    assert summary == {"batch": batch.id, "body": {"album": 7}, "done": 50, "failed": 0, "failures": []}
    assert calls.of("ok") == [{"batch": batch.id, "body": "yay", "done": 50, "failed": 0, "failures": []}]
    status = producer.batch_status(batch.id)
    assert status is not None and (status.total, status.done, status.fired, status.closed) == (50, 50, True, True)


def test_failures_are_listed_and_on_success_does_not_fire(start: Callable[..., Running], producer: Producer) -> None:
    """3 of 10 fail: on_complete says failed 3 with each id and reason; on_success stays silent."""
    calls = Calls()

    def work(m: Any) -> None:
        if m.body % 4 == 1:
            raise Reject(f"bad {m.body}")
    start(calls.handler(work), name="w")
    start(calls.handler(), name="done")
    start(calls.handler(), name="ok")
    with producer.batch(on_complete=("done", None), on_success=("ok", None)) as batch:
        ids = batch.publish_many("w", list(range(10)))
    wait_for(lambda: calls.of("done"), timeout_s=15)
    [summary] = calls.of("done")
    assert (summary["done"], summary["failed"]) == (7, 3)
    assert sorted(f["id"] for f in summary["failures"]) == sorted(ids[i] for i in (1, 5, 9))
    assert all(f["queue"] == "w" and f["reason"].startswith("rejected") for f in summary["failures"])
    assert calls.of("ok") == []


def test_a_batch_grows_from_inside_a_handler(start: Callable[..., Running], producer: Producer) -> None:
    """Each first-generation message adds two more to its batch; the callback waits for all 9, and fires once."""
    calls = Calls()

    def work(m: Any) -> None:
        if m.body < 100:
            m.batch.publish("w", m.body * 100 + 100)
            m.batch.publish_many("w", [m.body * 100 + 101])
    start(calls.handler(work), name="w", concurrency=4)
    start(calls.handler(), name="done")
    with producer.batch(on_complete=("done", "all")) as batch:
        batch.publish_many("w", [1, 2, 3])
    wait_for(lambda: calls.of("done"), timeout_s=15)
    assert sorted(calls.of("w")) == [1, 2, 3, 200, 201, 300, 301, 400, 401]
    assert calls.of("done")[0]["done"] == 9
    assert len(calls.of("done")) == 1


def test_a_batch_open_until_closed_and_listed(start: Callable[..., Running], producer: Producer,
                                              redis_url: str) -> None:
    """Nothing fires before close(), even with every message ended; it is listed open until then."""
    calls = Calls()
    start(calls.handler(), name="w")
    start(calls.handler(), name="done")
    batch = producer.batch(on_complete=("done", 1))
    batch.publish_many("w", [1, 2])
    wait_for(lambda: len(calls.of("w")) == 2)
    wait_for(lambda: (s := producer.batch_status(batch.id)) is not None and s.done == 2)
    assert calls.of("done") == []
    assert batch.id in Broker(redis_url, NS).batches.open_ids("done")
    batch.close()
    wait_for(lambda: calls.of("done"), timeout_s=10)
    assert batch.id not in Broker(redis_url, NS).batches.open_ids("done")
    with pytest.raises(MessageError, match="closed"):
        batch.publish("w", 3)
    assert batch.close() is False


def test_the_callback_waits_for_the_last_member(start: Callable[..., Running], producer: Producer) -> None:
    """Three members ending one at a time: nothing fires while one still runs; the callback fires once, after
    the last, with all three counted."""
    calls = Calls()
    gates = [threading.Event() for _ in range(3)]
    start(calls.handler(lambda m: gates[m.body].wait(30)), name="w", concurrency=3)
    start(calls.handler(), name="done")
    with producer.batch(on_complete=("done", 1)) as batch:
        batch.publish_many("w", [0, 1, 2])
    wait_for(lambda: len(calls.of("w")) == 3)
    for n, gate in enumerate(gates[:2], 1):
        gate.set()
        wait_for(lambda n=n: (s := producer.batch_status(batch.id)) is not None and s.done == n)
    # The ends are told at once; a callback fired early would be handled within this span.
    holds(lambda: calls.of("done") == [], 1.0, message="the callback fired before the last member ended")
    gates[2].set()
    wait_for(lambda: calls.of("done"), timeout_s=10)
    assert calls.of("done") == [{"batch": batch.id, "body": 1, "done": 3, "failed": 0, "failures": []}]


def test_a_block_that_raises_leaves_the_batch_open(start: Callable[..., Running], producer: Producer) -> None:
    """An exception in the with-block: the batch is not closed, so its callback never fires."""
    with pytest.raises(ZeroDivisionError):
        with producer.batch(on_complete=("done", 1)) as batch:
            batch.publish("w", 1)
            raise ZeroDivisionError("the caller's own bug")
    status = producer.batch_status(batch.id)
    assert status is not None and not status.closed and not status.fired


def test_an_empty_batch_fires_at_its_close(start: Callable[..., Running], producer: Producer) -> None:
    """A batch closed with no message fires at once: done 0, failed 0."""
    calls = Calls()
    start(calls.handler(), name="done")
    with producer.batch(on_complete=("done", "empty")):
        pass
    wait_for(lambda: calls.of("done"), timeout_s=10)
    assert calls.of("done")[0]["done"] == 0


# --- hostile input --------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    ({}, "give on_complete or on_success"), ({"on_complete": "q"}, "pair"), ({"on_complete": ("a b", 1)}, "queue"),
    ({"on_complete": ("q", object())}, "JSON"), ({"on_success": ("q",)}, "pair"), ({"on_complete": ("", 1)}, "queue"),
    ({"on_complete": ("q{x}", 1)}, "queue"), ({"on_complete": ("q", 1), "on_success": ["x" * 200, 1]}, "queue"),
    ({"on_complete": ("q", "x" * 2_000_000)}, "callback on 'q'"), ({"on_complete": ("q", float("nan"))}, "callback"),
    ({"on_success": ("q", _deep(5000))}, "callback"),
])
def test_hostile_callbacks_are_one_line(producer: Producer, kwargs: dict[str, Any], match: str) -> None:
    """No callback, not a pair, a queue that cannot exist, a body that is not JSON: MessageError."""
    with pytest.raises(MessageError, match=match):
        producer.batch(**kwargs)


def test_a_batchs_messages_take_a_group(start: Callable[..., Running], producer: Producer) -> None:
    """Batch.publish and publish_many with group (the README's "publish()'s options but dedup keys and
    depends_on"): each runs in its group under group_concurrency, counted in the batch, which fires."""
    seen: list[tuple[Any, Any]] = []
    calls = Calls()
    start(lambda m: seen.append((m.body, m.group)), name="w", group_concurrency=1)
    start(calls.handler(), name="done")
    with producer.batch(on_complete=("done", None)) as batch:
        batch.publish("w", "one", group="g", priority=4)
        batch.publish_many("w", ["two", "three"], group="h")
    wait_for(lambda: calls.of("done"), timeout_s=10)
    assert sorted(seen, key=str) == [("one", "g"), ("three", "h"), ("two", "h")]
    assert calls.of("done")[0]["done"] == 3
    with pytest.raises(MessageError, match="group: holds a control character"):
        producer.batch(on_complete=("done", None)).publish("w", 1, group="a\tb")


def test_hostile_member_options_and_ids(producer: Producer) -> None:
    """Dedup keys and depends_on are not for members; batch_status of odd ids says so or None."""
    batch = producer.batch(on_complete=("done", 1))
    for opts in ({"dedup_key": "k"}, {"depends_on": [("a", "b")]}, {"message_id": "x"}):
        with pytest.raises(MessageError, match="not for a batch"):
            batch.publish("w", 1, **opts)
    for bad in ("", "nope", 5, None, "@", "x@"):
        with pytest.raises(MessageError, match="batch_id"):
            producer.batch_status(bad)  # type: ignore[arg-type]
    assert producer.batch_status("unknown@done") is None


def test_garbage_in_the_batch_keys_costs_that_batch_only(start: Callable[..., Running], producer: Producer,
                                                         redis_client: redis.Redis) -> None:
    """A batch whose hash was overwritten with a string, garbage batch outbox entries: its members are still
    handled, the garbage is dropped, and another batch fires."""
    calls = Calls()
    start(calls.handler(), name="w")
    start(calls.handler(), name="done")
    doomed = producer.batch(on_complete=("done", "doomed"))
    doomed_id = parse_id(doomed.id)[1]  # type: ignore[index]
    redis_client.delete(QueueKeys(NS, "done").batch(doomed_id))
    redis_client.set(QueueKeys(NS, "done").batch(doomed_id), "garbage")
    doomed.publish("w", "member")
    redis_client.zadd(QueueKeys(NS, "w").deps, {b"B\tjunk": 0, b"S\tdone\tnot a frame": 0, b"B\tdone\tx\ty\tmaybe\t": 0,
                                                b"B\tdone\tgone-batch\tm1\tdone\tnull": 0})
    with producer.batch(on_complete=("done", "fine")) as fine:
        fine.publish("w", "other")
    wait_for(lambda: [b for b in calls.of("done") if b["body"] == "fine"], timeout_s=15)
    assert "member" in calls.of("w")
    wait_for(lambda: not [m for m in redis_client.zrange(QueueKeys(NS, "w").deps, 0, -1) if b"junk" in m
                          or b"maybe" in m or b"gone-batch" in m], timeout_s=10)
    done = QueueKeys(NS, "done")
    assert redis_client.exists(done.batch("gone-batch"), done.batch_members("gone-batch"),
                               done.batch_ended("gone-batch")) == 0  # (an end after its keys went makes none)
