"""The AsyncProducer against the Producer, on real redis-servers and a Redis
Cluster: the same frames in Redis, the same errors for the same bad input,
wait_replicas, an event loop that stays responsive under 1,000 publishes
awaited together, and Redis killed mid-way."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any, Optional

import pytest
import redis

from smqsup import AsyncProducer, Producer
from smqsup.errors import (
    BrokerConnectionError,
    PublishNotReplicated,
    PublishNotSent,
    PublishUncertain,
    SmqsupError,
)
from smqsup.keys import QueueKeys, partition_names, producers_hash, queues_set
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from tests.support.helpers import ticking, worst_gap
from tests.support.topology import SentinelTopology

pytestmark = pytest.mark.topologies

HEADERS = {"trace": "t-1", "n": [1, 2.5, None, True], "é": "ü\u2028"}
BODY = {"order": 42, "text": 'ünïcödé "quoted" \\ \u2028', "list": [1, 2.5, None, True, {"a": []}], "big": 10**30}


class AsyncDriver:
    """An AsyncProducer driven from plain test code, on an event loop of its own."""

    def __init__(self, url: str, **options: Any) -> None:
        self.producer = AsyncProducer(url, **options)
        self.loop = asyncio.new_event_loop()

    def publish(self, *args: Any, **options: Any) -> str:
        return self.loop.run_until_complete(self.producer.publish(*args, **options))

    def publish_many(self, *args: Any, **options: Any) -> list[str]:
        return self.loop.run_until_complete(self.producer.publish_many(*args, **options))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.producer.close())
        finally:
            self.loop.close()


def make(kind: str, url: str, **options: Any) -> Any:
    """A Producer (``kind`` "sync") or an AsyncDriver ("async") with ``options``."""
    return Producer(url, **options) if kind == "sync" else AsyncDriver(url, **options)


#: A message's size in an error: the digits of its created_at vary from one call to the next.
_SIZE = re.compile(r"message of \d+ bytes")


def outcome(act: Callable[[], Any]) -> tuple[str, str]:
    """(the class of the error ``act()`` raised, its text, a message's size left out), or ("ok", "")."""
    try:
        act()
    except SmqsupError as exc:
        return type(exc).__name__, _SIZE.sub("message of N bytes", str(exc))
    return "ok", ""


_ID = re.compile(rb'"id":"(?:[^"\\]|\\.)*"')
_CREATED = re.compile(rb'"created_at":[-0-9.e+]+')
_EXPIRES = re.compile(rb"^(\d+:\d+:)[1-9]\d*\|")


def norm(frame: bytes) -> bytes:
    """A frame with its id, created_at and expiry time (from the Redis clock) made constant."""
    return _EXPIRES.sub(rb"\1E|", _CREATED.sub(b'"created_at":T', _ID.sub(b'"id":"I"', frame, count=1), count=1))


def dump(client: Any, namespace: str, queues: list[str]) -> dict[str, Any]:
    """What a namespace holds for ``queues``, frames normalised (norm), plus its registry and producer count."""
    out: dict[str, Any] = {"registry": sorted(client.smembers(queues_set(namespace)))}
    for q in queues:
        k = QueueKeys(namespace, q)
        out[q] = {"pending": [norm(f) for f in client.lrange(k.pending, 0, -1)],
                  "priority": [(norm(m), s) for m, s in client.zrange(k.priority, 0, -1, withscores=True)],
                  "scheduled": sorted(norm(m) for m in client.zrange(k.scheduled, 0, -1)),
                  "counters": client.hgetall(k.counters)}
    stats = [json.loads(v) for v in client.hgetall(producers_hash(namespace)).values()]
    out["producers"] = sorted((s["namespace"], s["published"]) for s in stats)
    return out


def shape(ids: list[str]) -> list[int]:
    """Each id as the position of its first appearance (a deduplicated publish returns an earlier id)."""
    first: dict[str, int] = {}
    return [first.setdefault(mid, len(first)) for mid in ids]


SCENARIOS: dict[str, list[tuple[str, tuple[Any, ...], dict[str, Any]]]] = {
    "plain": [("publish", ("q", BODY), {}), ("publish", ("q", "second"), {}),
              ("publish", ("q", None), {"headers": HEADERS}), ("publish", ("q", 1), {"message_id": "my-id.1"}),
              ("publish_many", ("q", [1, "two", BODY]), {}), ("publish_many", ("q", [3, 4]), {"headers": HEADERS}),
              ("publish_many", ("q", list(range(2500))), {})],
    "options": [("publish", ("q", BODY), {"priority": 7}), ("publish", ("q", 2), {"delay": 30}),
                ("publish", ("q", 3), {"at": 4102444800}), ("publish", ("q", 4), {"ttl": 60, "priority": 2}),
                ("publish", ("q", 5), {"dedup_key": "k"}), ("publish", ("q", 6), {"dedup_key": "k"}),
                ("publish", ("q", 7), {"dedup_key": "k2", "dedup_ttl": 5, "headers": HEADERS, "message_id": "m"}),
                ("publish_many", ("q", [8, 9]), {"priority": 9, "headers": HEADERS}),
                ("publish_many", ("q", [10, 11, 12]), {"dedup_key": ["a", None, "a"]}),
                ("publish_many", ("q", list(range(1500))), {"priority": 1})],
    "partitions": [*[("publish", ("q", i), {}) for i in range(4)],
                   ("publish", ("q", "k"), {"partition_key": "order-7"}),
                   ("publish_many", ("q", [1, 2]), {"partition_key": "order-8", "priority": 3}),
                   ("publish_many", ("q", [1, 2, 3]), {}),
                   ("publish_many", ("q", [1, 2, 3, 4]), {"dedup_key": ["a", "b", "c", None]}),
                   ("publish", ("q", 5), {"dedup_key": "b"}), ("publish", ("q", 6), {"delay": 5})],
}


def run_scenario(kind: str, url: str, namespace: str, steps: list[tuple[str, tuple[Any, ...], dict[str, Any]]],
                 **options: Any) -> list[str]:
    """Every step's publish by a ``kind`` producer in ``namespace``; all the ids returned, in order."""
    producer = make(kind, url, namespace=namespace, **options)
    ids: list[str] = []
    try:
        for method, args, kwargs in steps:
            got = getattr(producer, method)(*args, **kwargs)
            ids += [got] if isinstance(got, str) else got
    finally:
        producer.close()
    return ids


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_async_producer_writes_the_frames_the_producer_writes(redis_url: str, redis_client: redis.Redis,
                                                                  scenario: str) -> None:
    """The same publishes by each producer, each in a namespace of its own: byte for byte the same frames
    (ids, created_at and expiry aside) in the same lists and sets, the same counters, registry, partitions
    chosen, deduplications and producer statistics."""
    parts = partition_names("q", 3 if scenario == "partitions" else 1)
    if scenario == "partitions":
        for ns in ("sa", "sb"):
            Broker(redis_url, ns).queues.declare_partitions("q", 3)
    sync_ids = run_scenario("sync", redis_url, "sa", SCENARIOS[scenario])
    async_ids = run_scenario("async", redis_url, "sb", SCENARIOS[scenario])
    assert shape(async_ids) == shape(sync_ids)
    got, expected = dump(redis_client, "sb", parts), dump(redis_client, "sa", parts)
    assert got["producers"] == [("sb", p) for _, p in expected.pop("producers")]
    got.pop("producers")
    assert got == expected
    assert sum(len(got[p]["pending"]) + len(got[p]["priority"]) + len(got[p]["scheduled"]) for p in parts) > 0


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


class Unencodable:
    """A body json cannot write."""


BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    *[("publish", (q, 1), {}) for q in ("", "a b", "q:1", "{q}", "é", ".", "..", "a" * 129, "q\n", 5, b"q", None)],
    ("publish_many", ("bad name", [1]), {}),
    *[("publish", ("q", body), {}) for body in (float("nan"), {"x": float("-inf")}, Unencodable(), {1, 2},
                                                _nested(990), "\udcff", {"\ud800": 1}, b"bytes")],
    *[("publish_many", ("q", bodies), {}) for bodies in ([1, float("nan")], "abc", {"a": 1}, 5, [_nested(101)])],
    ("publish", ("q", "y" * 300), {}), ("publish_many", ("q", ["y" * 300]), {}),
    ("publish", ("q", 1), {"headers": {"h": "\udcff"}}), ("publish", ("q", 1), {"headers": [1]}),
    *[("publish", ("q", 1), {"message_id": m}) for m in ("x\nforged", "", "a" * 129, 5, b"x", 1.5, "id\udcff")],
    *[("publish", ("q", 1), {option: value}) for option, value in (
        ("delay", float("nan")), ("delay", -1), ("delay", True), ("at", -1), ("at", "soon"), ("priority", 10),
        ("priority", 1.5), ("dedup_key", ""), ("dedup_key", "\udcff"), ("dedup_key", b"k"), ("ttl", 0),
        ("dedup_ttl", 5), ("partition_key", ""), ("partition_key", 7), ("partition_key", "\udcff"))],
    ("publish", ("q", 1), {"delay": 1, "at": 1}),
    *[("publish_many", ("q", [1, 2]), {"dedup_key": keys}) for keys in (["a"], b"ab", [1, 2], ["", "b"], 7)],
]


@pytest.mark.parametrize(("method", "args", "kwargs"), BAD_CALLS)
def test_bad_input_is_the_same_error_from_both_and_sends_nothing(
        redis_url: str, redis_client: redis.Redis, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """A bad queue name, body, size, header, id or option: the same error class and text from each
    producer, and nothing in Redis."""
    seen = []
    for kind in ("sync", "async"):
        producer = make(kind, redis_url, max_message_size=200)
        try:
            seen.append(outcome(lambda p=producer: getattr(p, method)(*args, **kwargs)))
        finally:
            producer.close()
    assert seen[0][0] == "MessageError", seen
    assert seen[1] == seen[0]
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize("options", [
    {"namespace": "bad:ns"}, {"namespace": 5}, {"max_message_size": 0}, {"max_message_size": True},
    {"dedup_ttl": 0}, {"wait_replicas": -1}, {"wait_replicas": "2"}, {"wait_timeout": float("nan")},
    {"url": "redis://h:x/"}, {"url": 7}, {"url": "redis://h/0?bogus_option=1"}, {"url": "sentinel://h:1"},
    {"url": "redis+cluster://:secret-pw@h:1/3"},
])
def test_bad_settings_are_the_same_error_from_both(options: dict[str, Any]) -> None:
    """A bad url, namespace, size, ttl or replica setting: the same ConfigError or MessageError from each
    constructor, before any I/O (a password never shown)."""
    url = options.pop("url", "redis://127.0.0.1:1/0")
    sync = outcome(lambda: Producer(url, **options))
    assert outcome(lambda: AsyncProducer(url, **options)) == sync
    assert sync[0] in ("ConfigError", "MessageError") and "secret-pw" not in sync[1]


@pytest.mark.parametrize("body", ["x" * (20 << 20), _nested(99), {"text": "[" * 5000, "\u2028": "\x00\x1f"}],
                         ids=["20 MiB", "nested 99", "controls"])
def test_hostile_bodies_that_fit_make_the_same_frames(redis_url: str, redis_client: redis.Redis, body: Any) -> None:
    """A 20 MiB body (under a raised max_message_size), nesting at the limit, control characters and
    brackets in strings: published by both, the same frames."""
    steps = [("publish", ("q", body), {}), ("publish_many", ("q", [body]), {"priority": 3})]
    for kind, ns in (("sync", "sa"), ("async", "sb")):
        run_scenario(kind, redis_url, ns, steps, max_message_size=64 << 20)
    got, expected = dump(redis_client, "sb", ["q"]), dump(redis_client, "sa", ["q"])
    assert got["q"] == expected["q"] and len(got["q"]["pending"]) + len(got["q"]["priority"]) == 2


@pytest.mark.parametrize("queue", ["-", "a" * 128, "Q.1_x-y", "...", "0"])
def test_odd_but_valid_queue_names_make_the_same_frames(redis_url: str, redis_client: redis.Redis,
                                                        queue: str) -> None:
    """Queue names at the edges of what is allowed: both producers queue the same frames there."""
    steps = [("publish", (queue, 1), {}), ("publish", (queue, 2), {"priority": 1}),
             ("publish_many", (queue, [3, 4]), {})]
    for kind, ns in (("sync", "sa"), ("async", "sb")):
        run_scenario(kind, redis_url, ns, steps)
    got, expected = dump(redis_client, "sb", [queue]), dump(redis_client, "sa", [queue])
    assert got[queue] == expected[queue] and got["registry"] == expected["registry"] == [queue.encode()]


def test_wait_replicas_confirms_a_publish_on_a_replicated_master(sentinel_group: SentinelTopology) -> None:
    """Through Sentinel, with a replica: wait_replicas 1 publishes as usual (a master without the
    scripts too: sent again by EVAL); 2 (one replica short) raises PublishNotReplicated naming the
    messages within wait_timeout, which are queued on the master all the same."""
    url = sentinel_group.url
    sentinel_group.client(sentinel_group.master).script_flush()

    async def main() -> None:
        async with AsyncProducer(url, wait_replicas=1) as producer:
            await producer.publish_many("q", [1, 2])
            await producer.publish("q", 3)
            await producer.publish("q", 4, priority=5)
        async with AsyncProducer(url, wait_replicas=2, wait_timeout=1.0) as producer:
            for send in (lambda: producer.publish("q", 5), lambda: producer.publish_many("q", [6, 7]),
                         lambda: producer.publish("q", 8, dedup_key="d")):
                with pytest.raises(PublishNotReplicated, match="1 of 2 replica") as caught:
                    await send()
                assert caught.value.replicas == 1 and caught.value.message_ids
    asyncio.run(main())
    assert Broker(url, "smq").statistics.sizes("q")["pending"] == 8


def test_wait_replicas_without_enough_replicas_raises_as_the_producer_does(redis_url: str, topology: str) -> None:
    """One replica asked: confirmed on the cluster (each master has one); on a lone server the same
    PublishNotReplicated (0 of 1) from both producers, for a first publish, a plain one and one with options."""
    steps = [("publish", ("q", 1), {}), ("publish", ("q", 2), {}), ("publish_many", ("q", [3]), {"delay": 0.001})]
    seen: dict[str, list[tuple[str, str]]] = {}
    for kind in ("sync", "async"):
        producer = make(kind, redis_url, wait_replicas=1, wait_timeout=0.05)
        try:
            seen[kind] = [outcome(lambda p=producer, m=m, a=a, k=k: getattr(p, m)(*a, **k)) for m, a, k in steps]
        finally:
            producer.close()
    expected = "ok" if topology == "cluster" else "PublishNotReplicated"
    assert [kind for kind, _ in seen["async"]] == [expected] * 3
    strip = re.compile(r"messages \S+\.\.\S+ ")
    assert [(k, strip.sub("", t)) for k, t in seen["async"]] == [(k, strip.sub("", t)) for k, t in seen["sync"]]


#: Longest gap between two 1 ms ticks of the event loop while 1,000 publishes are awaited, in s (the CPU
#: time of the loop's thread in a gap is reported beside it: a loop blocked on I/O shows as a gap without it).
STALL_BOUND_S = 0.050


@pytest.mark.exclusive
def test_a_thousand_publishes_awaited_together_keep_the_event_loop_responsive(
        redis_url: str, redis_client: redis.Redis, topology: str) -> None:
    """1,000 publishes (and then 1,000 with options) gathered at once on a cold producer: every message
    queued, and the loop's longest gap between 1 ms ticks stays under STALL_BOUND_S."""
    async def main() -> tuple[list[str], list[tuple[float, float]], list[tuple[float, float]]]:
        async with AsyncProducer(redis_url) as producer:
            plain, gaps = await ticking(lambda: asyncio.gather(*(producer.publish("q", {"n": i})
                                                                   for i in range(1000))))
            rich, more = await ticking(lambda: asyncio.gather(*(producer.publish("q", i, priority=1 + i % 9,
                                                                                  dedup_key=f"k{i}")
                                                                  for i in range(1000))))
        return plain + rich, gaps, more
    # The test process's heap (pytest's, every earlier test's) moved out of the collector's sight: a
    # full collection, triggered by the publishes' allocations, would otherwise walk all of it and hold
    # the loop for 30-120 ms here, a cost of the test process, not of the producer.
    gc.collect()
    gc.freeze()
    try:
        ids, gaps, more = asyncio.run(main())
    finally:
        gc.unfreeze()
    k = QueueKeys("smq", "q")
    assert len(set(ids)) == 2000 and redis_client.llen(k.pending) + redis_client.zcard(k.priority) == 2000
    print(f"\nloop stall ({topology}): plain: {worst_gap(gaps)}; options: {worst_gap(more)}", file=sys.stderr)
    assert max(wall for wall, _ in gaps + more) < STALL_BOUND_S, (worst_gap(gaps), worst_gap(more))


@pytest.mark.timeout(60)
def test_redis_killed_mid_way_is_a_connection_error_and_never_a_hang(redis_server: RedisServer) -> None:
    """SIGKILL of Redis while 1,000 publishes are awaited: each ends within seconds, with its id or a
    PublishUncertain or PublishNotSent; a publish after it is PublishNotSent; restarted, Redis holds
    every message whose id was returned (appendfsync always)."""
    async def main() -> tuple[list[Any], Optional[BaseException]]:
        async with AsyncProducer(redis_server.url) as producer:
            await producer.publish("q", "first")

            async def kill() -> None:
                deadline = time.monotonic() + 20
                while producer.published < 300 and time.monotonic() < deadline:
                    await asyncio.sleep(0.001)
                redis_server.kill()
            results = await asyncio.wait_for(asyncio.gather(
                *(producer.publish("q", i) for i in range(1000)), kill(), return_exceptions=True), 20)
            after: Optional[BaseException] = None
            try:
                await asyncio.wait_for(producer.publish("q", "after"), 10)
            except BaseException as exc:  # noqa: BLE001 - what it was is the assertion
                after = exc
        return results[:-1], after
    results, after = asyncio.run(main())
    ok = [r for r in results if isinstance(r, str)]
    failed = [r for r in results if not isinstance(r, str)]
    assert ok and failed, (len(ok), len(failed))
    assert all(isinstance(r, (PublishUncertain, PublishNotSent)) for r in failed), {type(r) for r in failed}
    assert isinstance(after, PublishNotSent) and isinstance(after, BrokerConnectionError), after
    redis_server.start()
    with redis.Redis.from_url(redis_server.url) as client:
        frames = client.lrange(QueueKeys("smq", "q").pending, 0, -1)
    held = {json.loads(f.split(b"|", 1)[1])["id"] for f in frames}
    assert set(ok) <= held


def test_a_cancelled_publish_leaves_the_producer_usable(redis_url: str, redis_client: redis.Redis) -> None:
    """Publishes cancelled in flight (a timeout around them): the producer goes on publishing, its
    connections back in step."""
    async def main() -> str:
        async with AsyncProducer(redis_url) as producer:
            tasks = [asyncio.ensure_future(producer.publish_many("q", list(range(200)))) for _ in range(40)]
            await asyncio.sleep(0)
            for task in tasks[::2]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return await producer.publish("q", "after")
    mid = asyncio.run(main())
    frames = redis_client.lrange(QueueKeys("smq", "q").pending, 0, 0)
    assert json.loads(frames[0].split(b"|", 1)[1])["id"] == mid
