"""Partitioned queues (``partitions: N``): producers spread messages over N hash
tags, each consumer prefers one and takes from the others when its own is
empty, and every view sums them. Each test runs on one redis-server and on a
Redis Cluster, where the partitions live on different masters."""

from __future__ import annotations

import collections
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.config.model import QueueConfig
from smqsup.keys import QueueKeys, partition_names
from smqsup.store import scripts
from smqsup.store.broker import Broker
from tests.support.helpers import Starts, holds, node_of, wait_for
from tests.support.inproc import NS, Running
from tests.test_partition_routing import PARTS, declare

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]

def test_consumers_prefer_different_partitions_and_every_message_is_handled_once(
        redis_url: str, producer: Producer, start: Callable[..., Running]) -> None:
    """Three consumers draw three different home partitions; 600 messages are each handled once."""
    declare(redis_url)
    seen: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def handle(m: Any) -> None:
        with lock:
            seen[m.body] += 1

    runs = [start(handle, partitions=3), start(handle, partitions=3), start(handle, partitions=3, concurrency=4)]
    wait_for(lambda: all(r.consumer.registered for r in runs))
    assert sorted(r.consumer.partitions.home for r in runs) == PARTS
    for i in range(0, 600, 20):
        producer.publish_many("q", list(range(i, i + 20)))
    wait_for(lambda: len(seen) == 600, timeout_s=20, message=f"{len(seen)} of 600")
    assert max(seen.values()) == 1
    assert all(r.consumer.stats.received > 0 for r in runs)


def test_a_lone_consumer_takes_from_every_partition(redis_url: str, producer: Producer,
                                                   start: Callable[..., Running]) -> None:
    """One consumer (home: one partition) empties all three, and one that arrives later blocks at home."""
    declare(redis_url)
    for i in range(90):
        producer.publish("q", i)
    seen: list[int] = []
    run = start(lambda m: seen.append(m.body), partitions=3)
    wait_for(lambda: len(seen) == 90, timeout_s=20)
    assert sorted(seen) == list(range(90))
    home = run.consumer.partitions.home
    wait_for(lambda: run.consumer.name == home, message="did not go home when all were empty")
    producer.publish("q", "late", partition_key=next(k for k in map(str, range(100))
                                                     if PARTS[zlib.crc32(k.encode()) % 3] != home))
    wait_for(lambda: "late" in seen, timeout_s=5)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_an_idle_consumer_of_partitions_does_not_poll_busily(concurrency: int, redis_url: str,
                                                              redis_client: redis.Redis) -> None:
    """Idle for 2 s with fetch_block_s 0.2 and 3 partitions: about one take per other partition per block
    (2 x 10 = 20), never a tight loop; the script calls on all masters are counted."""
    declare(redis_url)
    run = Running(redis_url, QueueConfig("q", "x:y", partitions=3, concurrency=concurrency), lambda m: None)
    try:
        wait_for(lambda: run.consumer.registered)
        servers = {id(node_of(redis_client, QueueKeys(NS, p).pending)): node_of(redis_client, QueueKeys(NS, p).pending)
                   for p in PARTS}

        def calls() -> int:
            return sum(int(v["calls"]) for s in servers.values()
                       for k, v in s.info("commandstats").items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
        before = calls()
        began = time.monotonic()
        holds(lambda: True, 2.0)
        per_s = (calls() - before) / (time.monotonic() - began)
    finally:
        run.stop()
    # The collector's own scripts (3 elections, promotes) ride along: well under a busy loop's thousands.
    assert per_s < 120, per_s


def test_views_sum_the_partitions(redis_url: str, producer: Producer) -> None:
    """read_queues and total_sizes give one queue: sizes, counters and the partition count summed."""
    broker = declare(redis_url)
    for i in range(30):
        producer.publish("q", i)
    producer.publish("q", "later", delay=60)
    now_ms, readings = broker.statistics.read_queues(["q"])
    r = readings["q"]
    assert r.partitions == 3 and r.sizes["pending"] == 30 and r.sizes["scheduled"] == 1
    assert int(r.counters[b"published"]) == 31
    assert broker.statistics.total_sizes("q")["pending"] == 30
    from smqsup.collector import stats
    from smqsup.views import status
    from smqsup.web import metrics
    snap = stats.snapshot(broker, ["q"])
    assert snap["queues"]["q"]["partitions"] == 3 and snap["queues"]["q"]["sizes"]["pending"] == 30
    assert 'smqsup_queue_partitions{queue="q"} 3' in metrics.render(snap)
    assert "q (3 partitions)" in status.render(snap)
    assert broker.queues.pause("q", "test") and all(broker.statistics.sizes(p)["paused"] if "paused" in broker.statistics.sizes(p) else
                                                    broker.client.exists(broker.keys(p).paused) for p in PARTS)
    assert broker.statistics.read_queues(["q"])[1]["q"].paused
    assert broker.queues.resume("q") and not broker.statistics.read_queues(["q"])[1]["q"].paused


@pytest.mark.sync_client_only("consumers' rate limits; the producer only publishes")
def test_a_rate_limit_is_split_over_the_partitions(redis_url: str, producer: Producer,
                                                    start: Callable[..., Running]) -> None:
    """rate_limit 30/s over 3 partitions: each partition 10/s, the queue as a whole at most 30/s."""
    declare(redis_url)
    assert QueueConfig("q", "x:y", rate_limit_per_s=30.0, rate_burst=3, partitions=3).rate == (33_333, 3)
    s = Starts()
    for _ in range(3):
        start(s.note, partitions=3, rate_limit_per_s=30.0)
    for i in range(60):
        producer.publish("q", i)
    wait_for(lambda: len(s.times) == 60, timeout_s=10)
    span = max(s.times) - min(s.times)
    assert 59 / span <= 30 * 1.15, f"{59 / span:.1f}/s"


@pytest.mark.sync_client_only("consumers' rate limits; the producer only publishes")
def test_a_rate_limit_holds_for_the_queue_whatever_count_the_file_gives(new_producer: Callable[..., Producer], redis_url: str,
                                                                       start: Callable[..., Running]) -> None:
    """partitions 1 in the file and 8 in Redis: rate_limit 5/s still holds for the queue (each partition
    keeps 5/8 a second; their bursts of one make 8 at once), so in 3 s at most 8 + 15 messages start; and
    two consumers reach every partition's share (a consumer the limit gives no start here looks at the
    others): the second burst of 8 comes."""
    Broker(redis_url, NS).queues.declare_partitions("q", 8)
    with new_producer(redis_url) as p:
        for i in range(64):
            p.publish("q", i)  # in turn over the 8 partitions the producer reads in Redis
    s = Starts()
    times = s.times
    for _ in range(2):
        start(s.note, rate_limit_per_s=5.0, concurrency=4)
    wait_for(lambda: times, timeout_s=10)
    first = min(times)
    wait_for(lambda: len(times) >= 16, timeout_s=10)  # the second burst's starts, booked 1.6 s after the first
    wait_for(lambda: time.monotonic() > first + 3.2, timeout_s=10, interval_s=0.1)
    within = [t for t in times if t <= first + 3]
    assert len(within) <= 8 + 15 + 1, f"{len(within)} started in 3 s"


def test_a_paused_queue_stays_paused_on_the_partitions_added_later(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis,
                                                                   start: Callable[..., Running]) -> None:
    """Paused with 1 partition, then consumers of 3 start (declaring 2 more): the new partitions are paused
    too, nothing runs and status says paused; resumed, every message runs."""
    broker = Broker(redis_url, NS)
    broker.queues.declare_partitions("q", 1)
    assert broker.queues.pause("q", "test")
    done: list[Any] = []
    start(lambda m: done.append(m.body), partitions=3)
    wait_for(lambda: Broker(redis_url, NS).queues.partitions("q") == 3)
    with new_producer(redis_url) as p:
        for i in range(9):
            p.publish("q", i)  # in turn over the 3 partitions
    holds(lambda: not done, 1.0)
    assert [bool(redis_client.exists(QueueKeys(NS, p).paused)) for p in partition_names("q", 3)] == [True] * 3
    assert Broker(redis_url, NS).statistics.read_queues(["q"])[1]["q"].paused
    assert Broker(redis_url, NS).queues.resume("q")
    wait_for(lambda: len(done) == 9, timeout_s=10)


@pytest.mark.parametrize("between", ["pause", "resume"])
def test_a_pause_or_resume_during_a_raise_leaves_every_partition_as_partition_0_is(
        between: str, redis_url: str, redis_client: redis.Redis) -> None:
    """The steps of a raise from 1 to 3 partitions with a pause (or resume) of the queue run between the
    first two, on the old count: the new partitions end as partition 0, paused (or not)."""
    b = Broker(redis_url, NS)
    b.queues.declare_partitions("q", 1)
    if between == "resume":
        b.queues.pause("q", "before")
    flag = redis_client.get(QueueKeys(NS, "q").paused)
    b.queues._prepare_partitions("q", 1, 3, flag)
    other = Broker(redis_url, NS)
    assert other.queues.pause("q", "meanwhile") if between == "pause" else other.queues.resume("q")
    scripts.partitions(b.keys("q"), 3).run(b.client)
    b.queues._follow_pause("q", 1, 3, flag)
    paused = [bool(redis_client.exists(QueueKeys(NS, p).paused)) for p in partition_names("q", 3)]
    assert paused == [between == "pause"] * 3


@pytest.mark.parametrize("junk", ["abc", "-5", "0", "nan", "1.5", "hash"])
def test_junk_in_a_partition_copy_of_the_count_costs_no_message(new_producer: Callable[..., Producer], junk: str, redis_url: str,
                                                                 redis_client: redis.Redis,
                                                                 start: Callable[..., Running]) -> None:
    """The copy of the partition count a partition's rate scripts divide by holding text, a count below 1,
    NaN, a fraction or another type: it counts as the consumer's own count, and every message runs."""
    declare(redis_url, 2)
    copy = QueueKeys(NS, "q~1").partitions
    redis_client.delete(copy)
    if junk == "hash":
        redis_client.hset(copy, "a", "b")
    else:
        redis_client.set(copy, junk)
    with new_producer(redis_url) as p:
        for i in range(20):
            p.publish("q", i)
    done: list[Any] = []
    start(lambda m: done.append(m.body), partitions=2, rate_limit_per_s=50.0)
    wait_for(lambda: len(done) == 20, timeout_s=10)


def test_the_partition_count_only_grows_and_junk_reads_as_one(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis) -> None:
    """Declared 3 then 2: 3 stays. Junk, a negative or a huge count in the key: 1, and at most 64."""
    broker = Broker(redis_url, NS)
    key = QueueKeys(NS, "q").partitions
    assert broker.queues.declare_partitions("q", 3) == 3 and broker.queues.declare_partitions("q", 2) == 3
    for junk, seen in ((b"abc", 1), (b"-5", 1), (b"1.5", 1), (b"\xff\xfe", 1), (b"99999999999999999999", 64),
                       (b"1000", 64), (b"9" * 5000, 64), (b"0007", 7)):
        redis_client.set(key, junk)
        assert Broker(redis_url, NS).queues.partitions("q") == seen, junk
        assert Broker(redis_url, NS).queues.declare_partitions("q", 2) == max(seen, 2)
        redis_client.set(key, junk)
    redis_client.delete(key)
    redis_client.hset(key, "x", "y")  # the wrong type: producers publish to the queue itself
    with new_producer(redis_url) as p:
        p.publish("q", 1)
    assert redis_client.llen(QueueKeys(NS, "q").pending) == 1


@pytest.mark.sync_client_only("supervised consumers' reclaim; the producer only publishes")
def test_a_supervised_partitioned_queue_handles_everything_and_reclaims_a_killed_child_in_its_partition(new_producer: Callable[..., Producer],
        supervise: Callable[..., Any], notify: Any, out_dir: Any, redis_url: str, redis_client: redis.Redis) -> None:
    """`smqsup -c` with partitions 3, 2 consumers: each registered in the 3 partitions; a child SIGKILLed
    in its handler has its message back (attempt counted, in the message's partition) and handled by the
    other; 90 messages are all handled; status sums the partitions and 3 collector locks are held."""
    import json
    import os
    import signal

    from tests.support import procs
    from tests.support.handlers import read_events

    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 2, "partitions": 3}}, notify)
    notify.wait("READY=1")
    assert [redis_client.hlen(QueueKeys(NS, p).consumers) for p in PARTS] == [2, 2, 2]
    with new_producer(redis_url) as p:
        mid = p.publish("q", {"sleep": 0.5}, partition_key="victim")
    victim_part = PARTS[zlib.crc32(b"victim") % 3]
    [first] = wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "start"])
    os.kill(first["pid"], signal.SIGKILL)
    again = wait_for(lambda: [e for e in read_events(str(out_dir))
                              if e["event"] == "start" and e["pid"] != first["pid"]], timeout_s=10)
    assert again[0]["id"] == mid and again[0]["attempts"] == 1
    assert int(redis_client.hget(QueueKeys(NS, victim_part).counters, "reclaimed") or 0) == 1
    with new_producer(redis_url) as p:
        ids = set(p.publish_many("q", [{"sleep": 0}] * 30) + [p.publish("q", {"sleep": 0}) for _ in range(60)])
    wait_for(lambda: ids <= {e["id"] for e in read_events(str(out_dir)) if e["event"] == "done"}, timeout_s=30)
    wait_for(lambda: all(redis_client.get(QueueKeys(NS, p).gc_lock) for p in PARTS), message="3 collector locks")

    def status() -> Any:  # the handler records "done" just before its ack: wait for the last ack
        queue = json.loads(procs.run("status", "-c", str(sup.cfg), "--json").stdout)["queues"]["q"]
        return queue if queue["counters"]["acked"] == 91 else None
    queue = wait_for(status, timeout_s=10)
    assert queue["partitions"] == 3 and queue["sizes"]["pending"] == 0 and queue["counters"]["published"] == 91


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_busy_home_does_not_starve_another_partition(concurrency: int, redis_url: str, producer: Producer,
                                                      start: Callable[..., Running]) -> None:
    """One consumer kept busy by its home partition still handles a message waiting in another one: it
    looks at the others every 64 messages (a concurrent one: 64 per slot, once its flights have landed)."""
    declare(redis_url, 2)
    seen: list[Any] = []
    run = start(lambda m: seen.append(m.body), partitions=2, concurrency=concurrency)
    wait_for(lambda: run.consumer.registered)
    home = run.consumer.partitions.home
    home_key = next(k for k in map(str, range(100)) if PARTS[zlib.crc32(k.encode()) % 2] == home)
    away_key = next(k for k in map(str, range(100)) if PARTS[zlib.crc32(k.encode()) % 2] != home)
    for i in range(0, 3000, 100):
        producer.publish_many("q", [i] * 100, partition_key=home_key)
    producer.publish("q", "away", partition_key=away_key)
    wait_for(lambda: "away" in seen, timeout_s=20)
    assert len(seen) < 3000, "the other partition waited until home was empty"


@pytest.mark.parametrize("junk", [b"abc", b"9223372036854775807", b"\xff\xfe", "hash"])
def test_junk_in_the_ticket_counter_never_keeps_a_consumer_from_starting(
        junk: Any, redis_url: str, redis_client: redis.Redis, producer: Producer,
        start: Callable[..., Running]) -> None:
    """The shared counter consumers draw their home from holds text, INCR's limit or a hash: the consumer
    draws at random instead, registers in every partition and handles what comes."""
    declare(redis_url)
    key = QueueKeys(NS, "q").partition_seq
    if junk == "hash":
        redis_client.hset(key, "x", "y")
    else:
        redis_client.set(key, junk)
    seen: list[int] = []
    run = start(lambda m: seen.append(m.body), partitions=3)
    wait_for(lambda: run.consumer.registered)
    assert run.consumer.partitions.home in PARTS
    for i in range(30):
        producer.publish("q", i)
    wait_for(lambda: len(seen) == 30)
