"""A queue's lag (the age of its oldest ready message, by the Redis clock): store/ops/lag.py and lag.lua, and how
status, --json and /metrics show it; whatever bytes the queue holds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from smqsup import defaults
from smqsup.client.producer import Producer
from smqsup.collector import stats
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.store.ops.lag import QueueLag, created_ms, frame_lag_ms
from smqsup.views import status
from smqsup.web import metrics
from tests.support import procs
from tests.support.helpers import redis_ms, wait_for

pytestmark = pytest.mark.topologies

NS = "smq"


def keys(queue: str) -> QueueKeys:
    return QueueKeys(NS, queue)


def frame(created: int, head: bytes = b"0") -> bytes:
    """A frame whose message id (26 hex characters, as ids.py makes them) says it was created at ``created`` ms."""
    return head + b'|{"id":"' + b"%012x" % created + b'0a1b2c3d000001","body":"x"}'


@pytest.fixture
def broker(redis_url: str) -> Iterator[Broker]:
    b = Broker(redis_url, NS)
    try:
        yield b
    finally:
        b.close()


def _lag(broker: Broker, queue: str, partitions: int = 1) -> QueueLag:
    return broker.lags.read({queue: partitions})[queue]


def test_an_empty_queue_has_lag_zero(broker: Broker, redis_client: redis.Redis) -> None:
    """No message ready: lag 0.0, ready 0, read at the Redis clock."""
    before = redis_ms(redis_client)
    lag = _lag(broker, "empty")
    assert (lag.ready, lag.lag_s) == (0, 0.0) and lag.at_ms >= before
    assert broker.lags.read({}) == {}


def test_lag_grows_while_a_published_message_waits(broker: Broker, redis_url: str) -> None:
    """A message nobody takes: its queue's lag grows from about 0 with the Redis clock."""
    with Producer(redis_url) as p:
        p.publish("waiting", "x")
    first = _lag(broker, "waiting")
    assert first.ready == 1 and first.lag_s is not None and 0.0 <= first.lag_s < 5.0
    later = wait_for(lambda: (lag := _lag(broker, "waiting")).lag_s is not None and lag.lag_s >= first.lag_s + 0.2
                     and lag, timeout_s=5)
    assert later.at_ms > first.at_ms


def test_the_lag_is_the_age_of_the_oldest_message_next_in_line(broker: Broker, redis_client: redis.Redis) -> None:
    """The pending list's right end (where consumers take) counts, not a newer message pushed on its left."""
    now = redis_ms(redis_client)
    redis_client.lpush(keys("q").pending, frame(now - 5000), frame(now - 1000), frame(now))
    lag = _lag(broker, "q")
    assert lag.ready == 3 and lag.lag_s is not None and 5.0 <= lag.lag_s < 15.0


@pytest.mark.parametrize("older", ["priority", "pending"])
def test_the_priority_set_is_considered_the_older_of_the_two_counts(
        broker: Broker, redis_client: redis.Redis, older: str) -> None:
    """Lag: the older of the pending list's next frame and the priority set's best; ready counts both."""
    now = redis_ms(redis_client)
    old, new = frame(now - 30_000, b"0:5:0"), frame(now - 1000, b"0:5:0")
    redis_client.lpush(keys("q").pending, old if older == "pending" else new)
    redis_client.zadd(keys("q").priority, {new if older == "pending" else old: 1})
    lag = _lag(broker, "q")
    assert lag.ready == 2 and lag.lag_s is not None and 30.0 <= lag.lag_s < 40.0


def test_a_queue_with_partitions_lags_by_its_worst_partition(broker: Broker, redis_client: redis.Redis) -> None:
    """Partitions: ready summed, lag the largest; the count Redis holds wins over a smaller one asked for."""
    broker.queues.declare_partitions("parts", 3)
    now = redis_ms(redis_client)
    redis_client.lpush(keys("parts").pending, frame(now - 2000))
    redis_client.lpush(keys("parts~2").pending, frame(now - 20_000))
    redis_client.zadd(keys("parts~1").priority, {frame(now - 4000, b"0:3:0"): 1})
    for asked in (3, 1):
        lag = _lag(broker, "parts", asked)
        assert lag.ready == 3 and lag.lag_s is not None and 20.0 <= lag.lag_s < 30.0, asked
    alone = broker.lags.read({"parts~1": 1})["parts~1"]  # a partition's own name: that partition only
    assert alone.ready == 1 and alone.lag_s is not None and 4.0 <= alone.lag_s < 14.0


#: Frames that give no lag, whatever Redis holds: (name, frame given the Redis clock now).
NO_LAG = [
    ("undecodable", lambda now: b"\xff\xfe\x00|\xff" * 10),
    ("no frame head", lambda now: b'{"id":"%012x0a1b2c3d000001"}' % now),
    ("no id", lambda now: b"0|hello"),
    ("empty", lambda now: b""),
    ("not hex", lambda now: b'0|{"id":"zzzzzzzzzzzz0a1b2c3d000001"}'),
    ("a custom id", lambda now: b'0|{"id":"order-42"}'),
    ("eleven years old", lambda now: frame(now - 11 * 365 * 86_400_000)),
    ("time zero", lambda now: frame(0)),
    ("a head cut at the id", lambda now: b"0|" + b" " * 200 + frame(now)),
]


@pytest.mark.parametrize(("name", "make"), NO_LAG, ids=[n for n, _ in NO_LAG])
def test_a_frame_without_a_readable_time_gives_an_unknown_lag(
        broker: Broker, redis_client: redis.Redis, name: str, make: Any) -> None:
    """Garbage next in line, in the list or the set: the lag is unknown (None), never an exception."""
    now = redis_ms(redis_client)
    redis_client.lpush(keys("list").pending, make(now))
    redis_client.zadd(keys("set").priority, {make(now): 1})
    lags = broker.lags.read({"list": 1, "set": 1})
    assert (lags["list"].ready, lags["list"].lag_s, lags["set"].ready, lags["set"].lag_s) == (1, None, 1, None)


def test_a_readable_frame_beside_garbage_gives_the_lag(broker: Broker, redis_client: redis.Redis) -> None:
    """Garbage at the list's end, a readable frame in the set (or another partition): the readable one counts."""
    now = redis_ms(redis_client)
    redis_client.lpush(keys("q").pending, b"\xff garbage")
    redis_client.zadd(keys("q").priority, {frame(now - 3000): 1})
    lag = _lag(broker, "q")
    assert lag.ready == 2 and lag.lag_s is not None and 3.0 <= lag.lag_s < 13.0


def test_a_time_ahead_of_the_redis_clock_gives_lag_zero(broker: Broker, redis_client: redis.Redis) -> None:
    """A message id dated ahead (its producer's clock runs fast): lag 0.0, not negative."""
    redis_client.lpush(keys("q").pending, frame(redis_ms(redis_client) + 3_600_000))
    assert _lag(broker, "q").lag_s == 0.0


def test_a_huge_frame_sends_only_its_head(broker: Broker, redis_client: redis.Redis) -> None:
    """A 1 MB frame next in line: lag.lua sends back its first LAG_HEAD_BYTES only, and the lag is read from them."""
    now = redis_ms(redis_client)
    k = keys("big")
    redis_client.lpush(k.pending, frame(now - 2000)[:-1] + b"x" * (1 << 20) + b'"}')
    redis_client.zadd(k.priority, {b"\xff" * (1 << 20): 1})
    raw = scripts.Call(scripts.LAG, (k.pending, k.priority, k.paused), (defaults.LAG_HEAD_BYTES,), lambda r: r).run(
        broker.client)
    assert raw[:2] == [1, 1] and len(raw[2]) == len(raw[3]) == defaults.LAG_HEAD_BYTES
    lag = _lag(broker, "big")
    assert lag.ready == 2 and lag.lag_s is not None and 2.0 <= lag.lag_s < 12.0


def test_keys_of_another_type_read_as_empty(broker: Broker, redis_client: redis.Redis) -> None:
    """A pending key that is a string and a priority key that is a hash: lag 0.0, nothing ready, no error."""
    redis_client.set(keys("odd").pending, "not a list")
    redis_client.hset(keys("odd").priority, "a", "b")
    assert _lag(broker, "odd").ready == 0 and _lag(broker, "odd").lag_s == 0.0


def test_reading_an_id_never_raises() -> None:
    """created_ms and frame_lag_ms on anything: a time, or None."""
    assert created_ms(frame(1_700_000_000_000)) == 1_700_000_000_000
    for junk in (None, "0|text", 12, b"", b"|", b"0|{\"id\":\"", b"0|" + b"\x80" * 300, b"9" * 10 + b"|{}"):
        assert created_ms(junk) is None and frame_lag_ms(junk, 1) is None
    assert frame_lag_ms(frame(1000), 4000) == 3000 and frame_lag_ms(frame(5000), 4000) == 0


def _lag_fixture(broker: Broker, redis_client: redis.Redis) -> None:
    """Queue 'old' 6 s behind, 'fresh' empty, 'junk' ready but unreadable."""
    now = redis_ms(redis_client)
    redis_client.sadd(f"{NS}:queues", "old", "fresh", "junk")
    redis_client.lpush(keys("old").pending, frame(now - 6000))
    redis_client.lpush(keys("junk").pending, b"\xff\xfe")


def test_status_shows_a_lag_column_and_json_carries_lag_s(
        broker: Broker, redis_client: redis.Redis, redis_url: str) -> None:
    """Table: a lag column (6.xs, 0.0s, - for unknown; TOTAL the largest); --json: lag_s per queue and in totals."""
    _lag_fixture(broker, redis_client)
    r = procs.run("status", "--url", redis_url)
    assert r.returncode == 0, r.stderr
    header, *rows = r.stdout.split("\n\n")[0].splitlines()
    columns = re.split(r" {2,}", header)
    assert columns[columns.index("dead") + 1] == "lag"
    lags = {cells[0]: cells[columns.index("lag")] for cells in (re.split(r" {2,}", ln) for ln in rows)}
    assert lags["fresh"] == "0.0s" and lags["junk"] == "-" and re.fullmatch(r"\d+\.\ds", lags["old"])
    assert 6.0 <= float(lags["old"][:-1]) < 30.0 and lags["TOTAL"] == lags["old"]
    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    assert snap["queues"]["fresh"]["lag_s"] == 0.0 and snap["queues"]["junk"]["lag_s"] is None
    old = snap["queues"]["old"]["lag_s"]
    assert 6.0 <= old < 30.0 and old == round(old, 3) and snap["totals"]["lag_s"] == old


def test_metrics_show_the_lag_of_each_queue_whose_lag_is_known(broker: Broker, redis_client: redis.Redis) -> None:
    """/metrics: smqsup_queue_lag_seconds per queue, with HELP and TYPE; none for a queue whose lag is unknown."""
    _lag_fixture(broker, redis_client)
    snap = stats.snapshot(broker, ["fresh", "junk", "old"])
    text = metrics.render(snap)
    assert "# TYPE smqsup_queue_lag_seconds gauge" in text and "# HELP smqsup_queue_lag_seconds " in text
    samples = {s.labels["queue"]: s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "smqsup_queue_lag_seconds"}
    assert set(samples) == {"fresh", "old"} and samples["fresh"] == 0 and 6.0 <= samples["old"] < 30.0
    assert "lag" in status.render(snap).splitlines()[0]


def test_a_paused_queue_says_so_with_its_lag(broker: Broker, redis_client: redis.Redis) -> None:
    """A pause on any partition reads as paused (autoscaling then counts the queue idle); its lag is still read."""
    now = redis_ms(redis_client)
    redis_client.lpush(keys("held").pending, frame(now - 3000))
    assert not _lag(broker, "held").paused
    broker.queues.pause("held", "test")
    lag = _lag(broker, "held")
    assert lag.paused and lag.ready == 1 and lag.lag_s is not None and lag.lag_s >= 3.0


def test_a_custom_message_id_gives_no_time() -> None:
    """Only an id ids.py made dates a message: a custom message_id starting with 12 hex digits does not."""
    for custom in (b"deadbeefcafe-order-1", b"0190aabbccdd" + b"f" * 13, b"0190aabbccdd" + b"f" * 15):
        head = b'0|{"id":"' + custom + b'","queue":"q","body":1}'
        assert created_ms(head) is None and frame_lag_ms(head, 10**12) is None


@pytest.mark.parametrize("where", ["delayed", "scheduled"])
def test_a_message_made_ready_late_lags_from_its_due_time_not_its_publish(
        broker: Broker, redis_client: redis.Redis, where: str) -> None:
    """A retry or a delayed publish due 50 ms ago, published 60 s ago: once promoted, its lag is about 50 ms."""
    now = redis_ms(redis_client)
    redis_client.zadd(getattr(keys("q"), where), {frame(now - 60_000): now - 50})
    assert broker.messages.promote("q").moved == 1
    lag = _lag(broker, "q")
    assert lag.ready == 1 and lag.lag_s is not None and 0.0 <= lag.lag_s < 30.0, lag


@pytest.mark.parametrize("junk", ["a string", "+inf", "-inf", "1e300", "ahead"])
def test_junk_in_the_ready_times_costs_no_message_and_no_read(
        broker: Broker, redis_client: redis.Redis, junk: str) -> None:
    """ready_at is Redis state anyone may write: of the wrong type, or a message's entry at ±inf, 1e300 or a day
    ahead, a due retry is still promoted and the lag still read (never negative, never past its publish)."""
    now = redis_ms(redis_client)
    f = frame(now - 60_000)
    mid = json.loads(f.split(b"|", 1)[1])["id"]
    if junk == "a string":
        redis_client.set(keys("q").ready_at, "garbage")
    else:
        score = {"+inf": float("inf"), "-inf": float("-inf"), "1e300": 1e300, "ahead": now + 86_400_000}[junk]
        redis_client.zadd(keys("q").ready_at, {mid: score})
    redis_client.zadd(keys("q").delayed, {f: now - 50})
    assert broker.messages.promote("q").moved == 1
    assert redis_client.lrange(keys("q").pending, 0, -1) == [f]
    lag = _lag(broker, "q")
    assert lag.ready == 1 and lag.lag_s is not None and 0.0 <= lag.lag_s <= 70.0, lag
