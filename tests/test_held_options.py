"""A message held by depends_on keeps every option it was published with:
its group (and the group's partition), priority, delay, ttl, headers, dedup
key, result_ttl and events, whether its last parent's consumer releases it
or the collector does after a crash; from the Producer and the
AsyncProducer (whose depends_on is the Producer's code on a thread). On one
Redis and on the Redis Cluster, consumers and collectors in threads."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest
import redis

from smqsup import MessageFailed, framing
from smqsup.client.aio_producer import AsyncProducer
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys, partition_name
from smqsup.store.broker import Broker
from smqsup.store.core.declared import Declared
from tests.support.helpers import redis_ms, wait_for
from tests.support.inproc import NS, Running

pytestmark = pytest.mark.topologies


class Client:
    """publish() of a Producer, or of an AsyncProducer on an event loop in a thread of its own."""

    def __init__(self, kind: str, url: str) -> None:
        self.kind = kind
        self._sync: Optional[Producer] = Producer(url) if kind == "sync" else None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._async: Optional[AsyncProducer] = None if self._sync else self._run(self._opened(url))

    async def _opened(self, url: str) -> AsyncProducer:
        return AsyncProducer(url)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def publish(self, queue: str, body: Any, **options: Any) -> str:
        if self._sync is not None:
            return self._sync.publish(queue, body, **options)
        assert self._async is not None
        return str(self._run(self._async.publish(queue, body, **options)))

    def chain(self, steps: list[Any]) -> list[str]:
        if self._sync is not None:
            return self._sync.chain(steps)
        assert self._async is not None
        return list(self._run(self._async.chain(steps)))

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
        if self._async is not None:
            self._run(self._async.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture(params=["sync", "async"])
def publisher(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Client]:
    """The Producer's publish, or the AsyncProducer's."""
    c = Client(request.param, redis_url)
    yield c
    c.close()


class Seen:
    """What a handler saw, in start order, and the most of one group running at once."""

    def __init__(self, work_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.items: list[Any] = []
        self.parents: dict[Any, dict[Any, Any]] = {}
        self.started: dict[Any, float] = {}
        self.running: dict[Any, int] = {}
        self.most: dict[Any, int] = {}
        self._pause = threading.Event()
        self._work_s = work_s

    def __call__(self, m: Any) -> Any:
        parents = dict(m.parents)  # (read while it runs: its parents' outcomes go with its end)
        with self.lock:
            self.items.append(m)
            self.parents[m.body] = parents
            self.started[m.body] = time.monotonic()
            n = self.running[m.group] = self.running.get(m.group, 0) + 1
            self.most[m.group] = max(self.most.get(m.group, 0), n)
        self._pause.wait(self._work_s)  # (the handler's work: a span for another of its group to overlap)
        with self.lock:
            self.running[m.group] -= 1
        return m.body

    def bodies(self) -> list[Any]:
        with self.lock:
            return [m.body for m in self.items]

    def of(self, body: Any) -> Any:
        with self.lock:
            return next(m for m in self.items if m.body == body)


def _released(producer: Producer, queue: str, ids: list[str]) -> None:
    """Wait until each of ``ids`` left its hold (waiting, or scheduled after its delay)."""
    wait_for(lambda: all(producer.state(queue, mid) in ("waiting", "scheduled") for mid in ids), timeout_s=10,
             message="children not released")


def test_a_held_childs_group_survives_its_hold(publisher: Client, producer: Producer,
                                               start: Callable[..., Running]) -> None:
    """Four children of group g held by one parent: released into g, message.group is "g", and
    group_concurrency 1 never lets two of g run at once on a consumer of 4 threads."""
    parent = producer.publish("a", "p", result_ttl=60)
    kids = [publisher.publish("b", i, group="g", depends_on=[("a", parent)], result_ttl=60) for i in range(4)]
    other = publisher.publish("b", "ungrouped", depends_on=[("a", parent)], result_ttl=60)
    seen = Seen(work_s=0.1)
    start(seen, name="b", concurrency=4, group_concurrency=1)
    start(lambda m: None, name="a")
    for mid in kids + [other]:
        producer.result("b", mid, timeout=15)
    assert {m.body: m.group for m in seen.items} == {0: "g", 1: "g", 2: "g", 3: "g", "ungrouped": None}
    assert seen.most["g"] == 1, seen.most
    assert [b for b in seen.bodies() if b != "ungrouped"] == [0, 1, 2, 3]


def test_a_held_childs_priority_orders_it_in_its_queue_and_its_group(
        publisher: Client, producer: Producer, start: Callable[..., Running]) -> None:
    """Children of priorities 1, 9 and 5 (three ungrouped, three of group g), all released before a consumer
    starts: each kind runs highest first."""
    parent = producer.publish("a", "p", result_ttl=60)
    ids = [publisher.publish("b", f"{g or 'u'}{prio}", priority=prio, group=g, depends_on=[("a", parent)],
                          result_ttl=60)
           for g in (None, "g") for prio in (1, 9, 5)]
    start(lambda m: None, name="a")
    _released(producer, "b", ids)
    seen = Seen()
    start(seen, name="b", prefetch=1)
    wait_for(lambda: len(seen.items) == 6, timeout_s=10)
    assert [b for b in seen.bodies() if b[0] == "u"] == ["u9", "u5", "u1"]
    assert [(m.body, m.group) for m in seen.items if m.body[0] == "g"] == [("g9", "g"), ("g5", "g"), ("g1", "g")]


@pytest.mark.parametrize("group", [None, "g"])
def test_a_held_childs_ttl_counts_from_its_release_and_expires_it(
        group: Optional[str], publisher: Client, producer: Producer, redis_client: redis.Redis,
        start: Callable[..., Running]) -> None:
    """A child with ttl=0.3 not taken within 0.3 s of its release is dead-lettered "expired" (grouped too)."""
    parent = producer.publish("a", "p", result_ttl=60)
    child = publisher.publish("b", "late", ttl=0.3, group=group, depends_on=[("a", parent)], result_ttl=60)
    start(lambda m: None, name="a")
    _released(producer, "b", [child])
    released_ms = redis_ms(redis_client)
    wait_for(lambda: redis_ms(redis_client) > released_ms + 350)  # its ttl passed, by the Redis clock
    seen = Seen()
    start(seen, name="b")
    with pytest.raises(MessageFailed) as failed:
        producer.result("b", child, timeout=10)
    assert failed.value.reason == "expired"
    assert seen.items == []


def test_a_held_childs_delay_counts_from_its_release_and_it_keeps_its_group(
        publisher: Client, producer: Producer, start: Callable[..., Running]) -> None:
    """A grouped child with delay=0.4 is scheduled at its release, then promoted into its group: it starts
    at least 0.4 s after its parent, as a message of g."""
    parent = producer.publish("a", "p", result_ttl=60)
    child = publisher.publish("b", "later", delay=0.4, group="g", depends_on=[("a", parent)], result_ttl=60)
    seen_a, seen_b = Seen(), Seen()
    start(seen_b, name="b", group_concurrency=1)
    start(seen_a, name="a")
    wait_for(lambda: producer.state("b", child) == "scheduled", timeout_s=10)
    assert producer.result("b", child, timeout=10) == "later"
    assert seen_b.of("later").group == "g"
    assert seen_b.started["later"] - seen_a.started["p"] >= 0.4


def test_a_held_childs_headers_result_and_events_arrive(publisher: Client, producer: Producer, redis_url: str,
                                                        start: Callable[..., Running]) -> None:
    """headers reach the handler; the child is tracked for its result_ttl; its events say it was published,
    released, started and done."""
    Broker(redis_url, NS).queues.declare_options("b", Declared(0, 10_000))
    wait_for(lambda: producer._broker.queues.partitions("b", fresh=True) and
             producer._broker.queues.declared("b")[1].events_max > 0)
    parent = producer.publish("a", "p", result_ttl=60)
    child = publisher.publish("b", "c", headers={"tenant": "t-1", "n": [1, 2]}, group="g",
                           depends_on=[("a", parent)], result_ttl=60)
    seen = Seen()
    start(seen, name="b", events=True)
    start(lambda m: "p-result", name="a")
    assert producer.result("b", child, timeout=10) == "c"
    m = seen.of("c")
    assert m.headers["tenant"] == "t-1" and m.headers["n"] == [1, 2]
    assert (m.group, seen.parents["c"]) == ("g", {("a", parent): "p-result"})
    wait_for(lambda: [e.event for e in producer.events("b") if e.message_id == child][-1:] == ["done"])
    assert [e.event for e in producer.events("b") if e.message_id == child] == \
        ["published", "released", "started", "done"]


def test_a_held_childs_dedup_key_holds_from_its_publish(publisher: Client, producer: Producer,
                                                        start: Callable[..., Running]) -> None:
    """While a child is held, and after it ran, its dedup key (dedup_ttl) deduplicates publishes with the
    same key, held or not: they return its id and queue nothing."""
    parent = producer.publish("a", "p", result_ttl=60)
    child = publisher.publish("b", "first", dedup_key="K", dedup_ttl=60, group="g", depends_on=[("a", parent)],
                           result_ttl=60)
    assert publisher.publish("b", "second", dedup_key="K") == child
    assert publisher.publish("b", "third", dedup_key="K", depends_on=[("a", parent)]) == child
    seen = Seen()
    start(seen, name="b")
    start(lambda m: None, name="a")
    assert producer.result("b", child, timeout=10) == "first"
    assert publisher.publish("b", "fourth", dedup_key="K", group="g") == child
    assert seen.bodies() == ["first"] and seen.items[0].group == "g"


def test_a_held_grouped_child_waits_in_its_groups_partition(
        publisher: Client, producer: Producer, redis_client: redis.Redis, start: Callable[..., Running]) -> None:
    """On a queue of 3 partitions a grouped child is held, and released, in the partition its group's name
    picks, where the group's other messages are; it runs as a message of that group."""
    redis_client.set(QueueKeys(NS, "b").partitions, "3")
    home = partition_name("b", zlib.crc32(b"tenant-7") % 3)
    parent = producer.publish("a", "p", result_ttl=60)
    child = publisher.publish("b", "held", group="tenant-7", depends_on=[("a", parent)], result_ttl=60)
    assert redis_client.hexists(QueueKeys(NS, home).blocked, child)
    start(lambda m: None, name="a")
    _released(producer, "b", [child])
    assert producer._broker.tracking.find(["b", "b~1", "b~2"], child)[0] == home
    seen = Seen()
    start(seen, name="b", partitions=3)
    assert producer.result("b", child, timeout=10) == "held"
    assert seen.of("held").group == "tenant-7"


def test_a_chain_step_takes_a_group(publisher: Client, producer: Producer, start: Callable[..., Running]) -> None:
    """chain() steps may give a group: each step after the first is held, and runs in its group."""
    ids = publisher.chain([("a", 1, {"group": "g"}), ("a", 2, {"group": "g"}), ("a", 3, {"group": "h", "result_ttl": 60})])
    seen = Seen()
    start(seen, name="a", group_concurrency=1)
    assert producer.result("a", ids[-1], timeout=10) == 3
    assert [(m.body, m.group) for m in seen.items] == [(1, "g"), (2, "g"), (3, "h")]


def test_a_chain_step_with_a_bad_group_is_refused_before_anything_is_sent(
        publisher: Client, redis_client: redis.Redis) -> None:
    """A chain whose second step's group is no group's name: MessageError, the first step not sent."""
    with pytest.raises(MessageError, match=r"group: holds a control character"):
        publisher.chain([("a", 1), ("b", 2, {"group": "a\x1bb"})])
    assert redis_client.llen(QueueKeys(NS, "a").pending) == 0


def test_the_collectors_release_keeps_the_options(producer: Producer, start: Callable[..., Running],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumer acks the parent but never tells its children (as if it died there): the collector's
    drain releases them with their group, priority and headers; group_concurrency 1 holds."""
    from smqsup.worker.settling import Settler
    monkeypatch.setattr(Settler, "_tell", lambda self: None)
    parent = producer.publish("a", "p", result_ttl=60)
    kids = [producer.publish("b", i, group="g", priority=i, headers={"i": i}, depends_on=[("a", parent)],
                             result_ttl=60) for i in range(3)]
    start(lambda m: None, name="a")
    _released(producer, "b", kids)
    seen = Seen(work_s=0.1)
    start(seen, name="b", concurrency=3, group_concurrency=1)
    for mid in kids:
        producer.result("b", mid, timeout=10)
    assert [(m.body, m.group, m.headers["i"]) for m in seen.items] == [(2, "g", 2), (1, "g", 1), (0, "g", 0)]
    assert seen.most["g"] == 1


def test_a_hold_the_collector_registers_keeps_the_options(
        producer: Producer, start: Callable[..., Running], monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer dies between the hold and telling the parents: the collector's repair registers the
    child, which is released in its group with its headers."""
    from smqsup import defaults
    from smqsup.store.ops import workflows
    parent = producer.publish("a", "p", result_ttl=60)

    def die(*_: Any, **__: Any) -> str:
        raise SystemExit("the producer died here")
    with monkeypatch.context() as m:
        m.setattr(workflows.Workflows, "register", die)
        with pytest.raises(SystemExit):
            producer.publish("b", "c", group="g", headers={"h": 1}, depends_on=[("a", parent)], result_ttl=60)
    monkeypatch.setattr(defaults, "HOLD_REPAIR_S", 0.3)
    seen = Seen()
    start(lambda m: None, name="a")
    start(seen, name="b")
    wait_for(lambda: seen.bodies() == ["c"], timeout_s=10)
    assert (seen.items[0].group, seen.items[0].headers["h"]) == ("g", 1)


def test_a_child_dead_lettered_for_its_parent_keeps_its_options_in_the_dead_letters(
        publisher: Client, producer: Producer, redis_url: str, start: Callable[..., Running]) -> None:
    """A parent fails: its grouped child is dead-lettered with its group, priority and headers in its frame;
    requeued by an operator, it runs in its group."""
    from smqsup.views import deadletters

    def fail(m: Any) -> None:
        raise ValueError("bad input")
    parent = producer.publish("a", "p", result_ttl=60)
    child = publisher.publish("b", "c", group="g", priority=7, headers={"h": 1}, depends_on=[("a", parent)],
                           result_ttl=60)
    start(fail, name="a", retry_threshold=1)
    with pytest.raises(MessageFailed, match="dependency failed"):
        producer.result("b", child, timeout=10)
    broker = Broker(redis_url, NS)
    [entry] = broker.client.lrange(QueueKeys(NS, "b").dead, 0, -1)
    head = framing.frame_head(entry.split(b"\n", 1)[1])
    assert (head.group, head.priority, json.loads(head.payload)["headers"]) == ("g", 7, {"h": 1})
    assert deadletters.requeue(broker, "b", [child]) == 1
    seen = Seen()
    start(seen, name="b", group_concurrency=1)
    wait_for(lambda: seen.bodies() == ["c"], timeout_s=10)
    m = seen.items[0]
    assert (m.group, m.headers["h"]) == ("g", 1)


@pytest.mark.parametrize("options, match", [
    ({"at": 4102444800}, "at: not with depends_on"),
    ({"dedup_key": "K", "dedup_until": "done"}, "dedup_until: not with depends_on"),
    ({"group": "g", "partition_key": "k"}, "partition_key and group"),
    ({"group": ""}, "group: expected 1 to 256 bytes"), ({"group": "a\nb"}, "group: holds a control character"),
    ({"group": "x" * 257}, "group: expected 1 to 256 bytes"), ({"group": 7}, "group: expected a string"),
])
def test_options_a_hold_cannot_keep_are_refused_in_one_line(publisher: Client, producer: Producer,
                                                            redis_client: redis.Redis, options: dict[str, Any],
                                                            match: str) -> None:
    """at, dedup_until, a partition_key beside a group, and hostile group names, with depends_on:
    MessageError of one line from either client, nothing held."""
    parent = producer.publish("a", "p", result_ttl=60)
    with pytest.raises(MessageError, match=match) as info:
        publisher.publish("b", "c", depends_on=[("a", parent)], **options)
    assert "\n" not in str(info.value)
    assert redis_client.exists(QueueKeys(NS, "b").blocked) == 0
