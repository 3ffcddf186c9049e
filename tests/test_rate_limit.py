"""queues.<name>.rate_limit: at most that many handler starts per period
across every consumer, enforced by the fetch scripts (GCRA by the Redis
clock), against a real redis-server; sequential and concurrent consumers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.config.model import QueueConfig
from smqsup.config.scalars import rate_limit
from smqsup.errors import ConfigError
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.worker.consumer import Consumer
from tests.support.helpers import Monitored, Starts, holds, node_of, wait_for
from tests.support.inproc import NS, Running

pytestmark = pytest.mark.topologies

K = QueueKeys(NS, "q")


def booked_starts(monitored: Monitored, interval_us: int) -> list[float]:
    """The starts a rate limit booked while ``monitored`` watched (in order,
    s since the epoch by the Redis clock): rate.lua's SET of the queue's
    rate key to the new theoretical arrival time, the booked start plus one
    interval."""
    return sorted((int(words[2]) - interval_us) / 1e6 for _, words in monitored.stop())


def rate_bookings(redis_url: str, key: str) -> Monitored:
    """Watch the bookings of the rate limit whose state is ``key``."""
    return Monitored(redis_url, lambda kind, words: kind == "lua" and words[0].upper() == "SET" and words[1:2] == [key])


def assert_starts_follow_bookings(starts_monotonic: Sequence[float], booked: Sequence[float],
                                  interval_s: float) -> None:
    """The two facts a rate limit rests on, exact whatever the machine's load:
    Redis booked no two starts closer than one interval (burst 1), and no
    handler started before a start was booked for it. Handlers time their
    starts on the monotonic clock, converted here to the wall clock Redis
    reads (one host). Starting late is the scheduler's, not the limit's: a
    start may match any booking at or before it, so the k-th start in time
    is at or after the k-th booking when none started early."""
    gaps = [b - a for a, b in zip(booked, booked[1:])]
    assert min(gaps) >= interval_s - 1e-6, f"two starts booked {min(gaps) * 1000:.3f} ms apart"
    offset = time.time() - time.monotonic()
    starts = sorted(t + offset for t in starts_monotonic)
    assert len(starts) <= len(booked), f"{len(starts)} handler starts, {len(booked)} booked"
    # 2 ms: reading the two clocks is not one instant, and Redis's TIME is
    # the start of its script, before the booked wait is counted.
    early = [(k, b - s) for k, (s, b) in enumerate(zip(starts, booked)) if s < b - 0.002]
    assert not early, f"{len(early)} starts before their booking, e.g. #{early[0][0]} by {early[0][1] * 1000:.1f} ms"


@pytest.mark.parametrize("kind", ["sequential", "tasks", "threads"])
@pytest.mark.single_node("MONITOR reads one server; test_partitions runs a split limit on the cluster")
@pytest.mark.exclusive
def test_two_consumers_start_at_most_the_limit_per_second(kind: str, start: Callable[..., Running],
                                                          producer: Producer, redis_url: str) -> None:
    """rate_limit 20/s over 2 consumers: Redis books the 60 starts at least 50 ms apart, no handler starts
    before its booking, and the achieved rate is at least 95 % of the limit."""
    s = Starts()

    def handle(msg: Any) -> None:
        s.note()

    async def handle_async(msg: Any) -> None:
        s.note()
    options: dict[str, Any] = {"rate_limit_per_s": 20.0}
    if kind != "sequential":
        options["concurrency"] = 4
    h = handle_async if kind == "tasks" else handle
    start(h, **options)
    start(h, **options)
    bookings = rate_bookings(redis_url, K.rate)
    producer.publish_many("q", list(range(60)))
    wait_for(lambda: len(s.times) == 60, timeout_s=10)
    assert_starts_follow_bookings(s.times, booked_starts(bookings, 50_000), 0.05)
    span = max(s.times) - min(s.times)
    assert 59 / span >= 0.95 * 20 * 0.95, f"{59 / span:.1f}/s"  # (the clock gap between Redis and us aside)


def test_a_burst_starts_at_once_then_the_rate_holds(start: Callable[..., Running], producer: Producer) -> None:
    """rate_limit 5/s, rate_burst 5, an idle queue: the first 5 start at once (not 0.8 s apart, as the
    rate alone would space them), the 10th a second or more after the first could."""
    s = Starts()
    producer.publish_many("q", list(range(10)))
    t0 = time.monotonic()  # before the first take: every start is booked after it
    start(lambda m: s.note(), rate_limit_per_s=5.0, rate_burst=5, concurrency=10)
    wait_for(lambda: len(s.times) == 10, timeout_s=10)
    ordered = sorted(s.times)
    # Upper bounds on handler starts are the scheduler's; these leave it room. The 10th is
    # booked 5 intervals (1 s) after the first take, whenever the handlers ran.
    assert ordered[4] - ordered[0] < 0.5, f"the burst took {ordered[4] - ordered[0]:.2f} s"
    assert ordered[9] - t0 >= 0.95, f"the 10th started {ordered[9] - t0:.2f} s after the first could"


def test_an_empty_queue_waits_in_blmove_and_a_new_message_starts_under_the_limit(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A rate-limited consumer blocked on an empty queue takes a message at once (the limit was unused),
    and the next one published right after waits for its slot (1/s)."""
    s = Starts()
    start(lambda m: s.note(), rate_limit_per_s=1.0)
    server = node_of(redis_client, K.pending)
    wait_for(lambda: any("b" in c["flags"] and c["cmd"] == "blmove" for c in server.client_list()))
    t0 = time.monotonic()  # before the first take: its booking is after this
    producer.publish("q", 1)
    producer.publish("q", 2)
    wait_for(lambda: len(s.times) == 2, timeout_s=5)
    # The first is booked at once, the second one interval after it (a late first start would
    # narrow the gap between the two handler starts, not the booking).
    assert s.times[0] - t0 < 0.9, f"the first waited {s.times[0] - t0:.2f} s"
    assert s.times[1] - t0 >= 0.95, f"the second started {s.times[1] - t0:.2f} s after the publish"


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_limit_far_below_the_backlog_holds_nothing_in_flight_for_long(
        concurrency: int, producer: Producer, redis_url: str, redis_client: redis.Redis) -> None:
    """rate_limit 1/m: one message starts now, the next is not taken (left pending) rather than held for a
    minute in the consumer's list; while it waits the consumer asks Redis about once a second, not in a
    busy loop (its scripts counted by INFO commandstats: no collector runs here)."""
    s = Starts()
    c = Consumer(Broker(redis_url, NS), QueueConfig("q", "m:f", rate_limit_per_s=1 / 60,
                                                         concurrency=concurrency), lambda m: s.note(),
                      fetch_block_s=0.2)
    runner = threading.Thread(target=c.run, daemon=True)
    producer.publish_many("q", [1, 2, 3])
    runner.start()
    try:
        wait_for(lambda: len(s.times) == 1, timeout_s=5)
        before = _script_calls(redis_client)
        # For 2.5 s nothing more starts and two stay pending; then count how often it asked meanwhile.
        holds(lambda: len(s.times) == 1 and redis_client.llen(K.pending) == 2, 2.5)
        asked = _script_calls(redis_client) - before
        assert not redis_client.llen(K.processing(c.consumer_id))
        assert asked <= 6, asked
    finally:
        c.request_stop()
        runner.join(10)


def _script_calls(client: redis.Redis) -> int:
    info = node_of(client, K.pending).info("commandstats")
    return sum(int(v["calls"]) for k, v in info.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def test_garbage_in_the_rate_key_costs_the_limit_one_start_never_a_message(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """The rate key overwritten with text, a hash, inf: every message is still handled once."""
    done: list[Any] = []
    for garbage in ("not a number", "inf", "-1e308"):
        redis_client.set(K.rate, garbage)
        producer.publish_many("q", [garbage] * 3)
    redis_client.delete(K.rate)
    redis_client.hset(K.rate, "a", "b")
    producer.publish_many("q", ["hash"] * 3)
    start(lambda m: done.append(m.body), rate_limit_per_s=100.0, concurrency=3)
    wait_for(lambda: len(done) == 12, timeout_s=10)


@pytest.mark.exclusive
def test_the_fetch_scripts_book_starts_by_the_redis_clock(producer: Producer, redis_client: redis.Redis) -> None:
    """take.lua with a limit of 10/s books each frame 100 ms after the one before, and takes none past the
    1 s horizon: 10 frames of 15, then a retry wait."""
    broker = Broker(producer._broker.url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    producer.publish_many("q", list(range(15)))
    took = broker.messages.take("q", "c", 15, (100_000, 1, 1))
    assert len(took.frames) == 11 and took.waits_us[0] == 0
    gaps = [b - a for a, b in zip(took.waits_us, took.waits_us[1:])]
    assert all(99_000 <= g <= 100_000 for g in gaps), gaps
    again = broker.messages.take("q", "c", 1, (100_000, 1, 1))
    assert not again.frames and 1_000_000 < again.retry_us <= 1_100_000
    assert redis_client.llen(K.pending) == 4


def _consumer(redis_url: str, s: Starts, **options: Any) -> tuple[Any, threading.Thread]:
    c = Consumer(Broker(redis_url, NS), QueueConfig("q", "m:f", **options), lambda m: s.note(),
                      fetch_block_s=0.2)
    runner = threading.Thread(target=c.run, daemon=True)
    runner.start()
    return c, runner


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_deleted_rate_key_is_followed_within_a_second(concurrency: int, producer: Producer, redis_url: str,
                                                        redis_client: redis.Redis) -> None:
    """rate_limit 1/h: one message starts and the next waits; the rate key deleted (an operator's repair),
    the next starts within about a second, not an hour later (the consumer asks again at least each second)."""
    s = Starts()
    producer.publish_many("q", [1, 2, 3])
    c, runner = _consumer(redis_url, s, rate_limit_per_s=1 / 3600, concurrency=concurrency)
    try:
        wait_for(lambda: len(s.times) == 1, timeout_s=5)
        holds(lambda: len(s.times) == 1, 0.3)
        redis_client.delete(K.rate)
        wait_for(lambda: len(s.times) == 2, timeout_s=2.5, message="the deleted key was not followed")
    finally:
        c.request_stop()
        runner.join(10)


def _ahead_us(client: redis.Redis, hours: float) -> str:
    seconds, micros = node_of(client, K.pending).time()
    return str(seconds * 1_000_000 + micros + int(hours * 3600e6))


@pytest.mark.parametrize("stored", ["1e300", "9.3e18", "an hour ahead"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_rate_key_far_ahead_is_read_as_far_as_the_limit_books(
        stored: str, concurrency: int, producer: Producer, redis_url: str, redis_client: redis.Redis) -> None:
    """The rate key holding a time no start under the limit could book (1e300, past 2^63, or an hour ahead,
    as a Redis clock stepped back or a slower limit leave it): at 20/s, 20 messages all start within a few
    seconds, and the consumer asks Redis a bounded number of times (no spinning on a wait read as 0)."""
    redis_client.set(K.rate, _ahead_us(redis_client, 1) if stored == "an hour ahead" else stored)
    producer.publish_many("q", list(range(20)))
    s = Starts()
    before = _script_calls(redis_client)
    c, runner = _consumer(redis_url, s, rate_limit_per_s=20.0, concurrency=concurrency)
    try:
        wait_for(lambda: len(s.times) == 20, timeout_s=6)
        asked = _script_calls(redis_client) - before
        assert asked <= 60, asked
    finally:
        c.request_stop()
        runner.join(10)


def test_the_lua_partition_bound_is_the_configured_one() -> None:
    """includes/rate.lua caps the partition count it divides by at defaults.PARTITIONS_MAX."""
    from smqsup import defaults
    from smqsup.store import scripts

    take = next(s for s in scripts.ALL if s.name == "take")
    assert f"local RATE_PARTITIONS_MAX = {defaults.PARTITIONS_MAX}\n" in take.text


@pytest.mark.parametrize(("text", "per_s"), [("100/s", 100.0), ("30/m", 0.5), ("30/min", 0.5),
                                              ("1800/h", 0.5), ("0.5/s", 0.5), (" 7 / S ", 7.0),
                                              ("1000000/s", 1e6), ("1/d", 1 / 86400), ("2/day", 2 / 86400),
                                              ("5/sec", 5.0), ("90/hour", 0.025)])
def test_rate_limits_read(text: str, per_s: float) -> None:
    assert rate_limit(text, "queues.q.rate_limit", "f.yaml") == per_s


@pytest.mark.parametrize("text", ["100", 100, "100/w", "1/days", "0.5/d", "-1/s", "0/s", "1e3/s", "nan/s", "inf/s", "/s", "1/",
                                  "1000001/s", "0.000001/h", "9" * 400 + "/s", "1/s/s", True, None, [1], "١/s"])
def test_bad_rate_limits_are_one_line_errors(text: object) -> None:
    with pytest.raises(ConfigError, match=r"^f\.yaml: queues\.q\.rate_limit: ") as info:
        rate_limit(text, "queues.q.rate_limit", "f.yaml")
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


def test_a_queue_without_a_limit_sends_none() -> None:
    assert QueueConfig("q", "m:f").rate == (0, 1)
    assert QueueConfig("q", "m:f", rate_limit_per_s=50.0, rate_burst=3).rate == (20_000, 3)
    assert QueueConfig("q", "m:f", rate_limit_per_s=1e6).rate == (1, 1)
