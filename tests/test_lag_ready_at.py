"""A message made ready after its publish counts its lag from then (includes/ready_at.lua): a retry without
delay, a started message back from a dead or stale consumer, a child its parents released. One never started
(given back free) keeps its own; the ready times kept are bounded. Real scripts on a real Redis (and Cluster)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.ops.lag import QueueLag
from tests.support.helpers import redis_ms, wait_for
from tests.support.inproc import Running

pytestmark = pytest.mark.topologies

NS = "smq"
#: How old the messages here are at their publish, by their ids: a lag read from the publish is at least this.
OLD_MS = 60_000
#: Most a lag counted from a ready time just written may read (a slow machine's margin, far below OLD_MS).
FRESH_S = 30.0


def keys(queue: str) -> QueueKeys:
    return QueueKeys(NS, queue)


def old_id(created_ms: int, n: int = 1) -> str:
    """A message id (26 hex characters, as ids.py makes them) dated ``created_ms``."""
    return "%012x0a1b2c3d%06x" % (created_ms, n)


def frame(created_ms: int, n: int = 1) -> bytes:
    return b'0|{"id":"' + old_id(created_ms, n).encode() + b'","body":"x"}'


def ready_at(client: redis.Redis, queue: str, f: bytes) -> object:
    return client.zscore(keys(queue).ready_at, json.loads(f.split(b"|", 1)[1])["id"])


@pytest.fixture
def broker(redis_url: str) -> Iterator[Broker]:
    with contextlib.closing(Broker(redis_url, NS)) as b:
        yield b


def _lag(broker: Broker, queue: str) -> QueueLag:
    return broker.lags.read({queue: 1})[queue]


def _fresh(lag: QueueLag, ready: int = 1) -> bool:
    return lag.ready == ready and lag.lag_s is not None and 0.0 <= lag.lag_s < FRESH_S


def test_a_retry_without_delay_lags_from_its_retry(broker: Broker, redis_client: redis.Redis) -> None:
    """Published a minute ago, taken and failed now, ready again at once: its lag is about 0, not a minute."""
    f = frame(redis_ms(redis_client) - OLD_MS)
    redis_client.lpush(keys("q").processing("c1"), f)
    result = broker.messages.nack("q", "c1", f, retry_threshold=5, delay_ms=0, meta='{"reason":"x"}',
                                  fetch_next=False)
    assert result.outcome == 1
    assert _fresh(_lag(broker, "q")), _lag(broker, "q")


def test_a_started_message_back_from_a_dead_consumer_lags_from_its_return(
        broker: Broker, redis_client: redis.Redis) -> None:
    """Of a dead consumer's two frames, the one it had started comes back with its lag from now; the one it had
    only prefetched goes back free and keeps the lag of its publish (it waited all along)."""
    now = redis_ms(redis_client)
    started, prefetched = frame(now - OLD_MS, 1), frame(now - OLD_MS, 2)
    redis_client.lpush(keys("q").processing("c1"), started, prefetched)  # (the right end: the oldest, started)
    result = broker.registry.reclaim_dead("q", "c1", retry_threshold=5, reason="died", started=1)
    assert (result.requeued, result.remaining) == (2, 0)
    assert ready_at(redis_client, "q", prefetched) is None
    assert isinstance(ready_at(redis_client, "q", started), float)
    assert _fresh(_lag(broker, "q"), ready=2), _lag(broker, "q")  # (the started one is next in line)


def test_a_message_back_from_a_stale_consumer_lags_from_its_return(broker: Broker, redis_client: redis.Redis) -> None:
    """The collector's reclaim of a consumer whose heartbeat stopped: the message lags from its return."""
    f = frame(redis_ms(redis_client) - OLD_MS)
    redis_client.lpush(keys("q").processing("c1"), f)
    result = broker.registry.reclaim_stale("q", "c1", retry_threshold=5, reason="stale", stale_after_ms=1)
    assert result.requeued == 1
    assert _fresh(_lag(broker, "q")), _lag(broker, "q")


def test_a_child_lags_from_its_release_not_its_publish(
        producer: Producer, broker: Broker, start: Callable[..., Running]) -> None:
    """A child published a minute ago waits for its parent; released now, its lag is about 0."""
    parent = producer.publish("a", "p", result_ttl=60)
    child = producer.publish("b", "c", depends_on=[("a", parent)], result_ttl=60,
                             message_id=old_id(int(parent[:12], 16) - OLD_MS))
    assert producer.state("b", child) == "blocked"
    start(lambda m: None, name="a")
    wait_for(lambda: producer.state("b", child) == "waiting", timeout_s=10, message="child not released")
    assert _fresh(_lag(broker, "b")), _lag(broker, "b")


def test_the_ready_times_kept_are_bounded(broker: Broker, redis_client: redis.Redis) -> None:
    """With the newest 10,000 ready times written, one more pushes out the oldest: the set never grows past."""
    now = redis_ms(redis_client)
    k = keys("q").ready_at
    pipe = redis_client.pipeline(transaction=False)
    for i in range(0, 10_000, 1000):
        pipe.zadd(k, {old_id(now - OLD_MS, n): now - OLD_MS + n for n in range(i, i + 1000)})
    pipe.execute()
    f = frame(now - OLD_MS, 20_000)
    redis_client.lpush(keys("q").processing("c1"), f)
    broker.messages.nack("q", "c1", f, retry_threshold=5, delay_ms=0, meta='{"reason":"x"}', fetch_next=False)
    assert redis_client.zcard(k) == 10_000
    assert isinstance(ready_at(redis_client, "q", f), float)
    assert redis_client.zscore(k, old_id(now - OLD_MS, 0)) is None


@pytest.mark.parametrize("how", ["retry", "reclaim", "stale"])
def test_ready_times_of_the_wrong_type_cost_no_message(broker: Broker, redis_client: redis.Redis, how: str) -> None:
    """The ready times are Redis state anyone may overwrite: a string there, and a retry without delay, a dead
    consumer's reclaim and a stale one's still put the message back where consumers take it (its lag then
    counts from its publish)."""
    redis_client.set(keys("q").ready_at, "garbage")
    f = frame(redis_ms(redis_client) - OLD_MS)
    redis_client.lpush(keys("q").processing("c1"), f)
    if how == "retry":
        assert broker.messages.nack("q", "c1", f, retry_threshold=5, delay_ms=0, meta='{"reason":"x"}',
                                    fetch_next=False).outcome == 1
    elif how == "reclaim":
        assert broker.registry.reclaim_dead("q", "c1", retry_threshold=5, reason="died").requeued == 1
    else:
        assert broker.registry.reclaim_stale("q", "c1", retry_threshold=5, reason="stale",
                                             stale_after_ms=1).requeued == 1
    assert redis_client.llen(keys("q").pending) == 1 and redis_client.get(keys("q").ready_at) == b"garbage"
    lag = _lag(broker, "q")
    assert lag.ready == 1 and lag.lag_s is not None and lag.lag_s >= OLD_MS / 1000 - 1
