"""The lag of a queue with message groups (store/ops/lag.py, lag.lua): it counts
the grouped messages consumers could take (not a paused group's, not
garbage in the groups' ready set) and dates them even when no group's turn
is next in the pending list."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.ops.lag import QueueLag
from tests.support.helpers import redis_ms

pytestmark = pytest.mark.topologies

K = QueueKeys("smq", "q")


@pytest.fixture
def broker(redis_url: str) -> Iterator[Broker]:
    b = Broker(redis_url, "smq")
    try:
        yield b
    finally:
        b.close()


def _lag(broker: Broker) -> QueueLag:
    return broker.lags.read({"q": 1})["q"]


def test_a_paused_groups_messages_are_not_ready(broker: Broker, producer: Producer) -> None:
    """100 messages of a paused group and nothing else: ready 0, lag 0; resumed, all 100 are ready again."""
    producer.publish_many("q", [{"n": n} for n in range(100)], group="held")
    assert _lag(broker).ready == 100
    broker.groups.pause("q", "held", "test")
    lag = _lag(broker)
    assert (lag.ready, lag.lag_s) == (0, 0.0)
    producer.publish("q", "plain")
    producer.publish("q", "other", group="free")
    assert _lag(broker).ready == 2
    broker.groups.resume("q", "held", )
    assert _lag(broker).ready == 102


def test_garbage_in_the_groups_ready_set_is_not_ready(broker: Broker, producer: Producer,
                                                      redis_client: redis.Redis) -> None:
    """100 members written by hand into groups:ready, in no group's count: ready 0, the lag 0."""
    redis_client.zadd(K.groups[0], {f"garbage {n}": 0 for n in range(100)})
    lag = _lag(broker)
    assert (lag.ready, lag.lag_s) == (0, 0.0)
    producer.publish("q", "x", group="g")
    assert _lag(broker).ready == 1


def test_a_grouped_backlog_has_a_lag_when_no_turn_is_in_the_pending_list(
        broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """Every group's turn out of the pending list (blocked at its limit, or held by a fetch): the lag still dates
    the oldest group's next message."""
    producer.publish_many("q", [{"n": n} for n in range(3)], group="a")
    producer.publish("q", "b", group="b")
    redis_client.delete(K.pending)  # as when every turn is taken: the consumers' lists hold them
    redis_client.hset(K.groups[2], mapping={"s:a": "b", "s:b": "b"})
    before = redis_ms(redis_client)
    lag = _lag(broker)
    assert lag.ready == 4 and lag.lag_s is not None and 0.0 <= lag.lag_s <= (redis_ms(redis_client) - before) / 1e3 + 5


def test_a_plain_message_behind_group_turns_is_counted_once_and_dated(
        broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """A plain message published first, then two groups' turns to its right: three ready, dated by the oldest."""
    producer.publish("q", "plain")
    producer.publish("q", "a", group="a")
    producer.publish("q", "b", group="b")
    redis_client.rpush(K.pending, redis_client.lpop(K.pending), redis_client.lpop(K.pending))  # turns rightmost
    assert redis_client.lindex(K.pending, -1).startswith(b"*")
    lag = _lag(broker)
    assert lag.ready == 3 and lag.lag_s is not None


def _repair_all(broker: Broker, redis_client: redis.Redis) -> None:
    """The collector's group repair, round after round until its cursor is back at the start."""
    redis_client.set(K.gc_lock, "me")
    cursor, rounds = broker.groups.repair("q", (K.gc_lock, "me"), 0)[0], 1
    while cursor != b"0" and rounds < 100:
        cursor, rounds = broker.groups.repair("q", (K.gc_lock, "me"), 0, cursor)[0], rounds + 1
    assert cursor == b"0"


def test_the_repair_dead_letters_garbage_in_the_groups_ready_set_and_gives_an_orphan_group_its_turn(
        broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """Members in no group's layout go to the dead letters, whole; a group's messages with no count entry and no
    turn (keys deleted by hand) get both: consumers can take them again."""
    from smqsup.deadletter import DeadLetter

    garbage = {f"garbage {n}".encode(): 0 for n in range(300)} | {b"5:ab\tshort\nx": 0, b"*fake": 0}
    redis_client.zadd(K.groups[0], garbage)
    producer.publish_many("q", ["o1", "o2"], group="orphan")
    redis_client.delete(K.pending, K.groups[1], K.groups[2])
    _repair_all(broker, redis_client)
    assert redis_client.zcard(K.groups[0]) == 2
    dead = [DeadLetter(raw) for raw in redis_client.lrange(K.dead, 0, -1)]
    assert sorted(d.frame for d in dead) == sorted(garbage) and {d.reason for d in dead} == {"malformed"}
    assert redis_client.lrange(K.pending, 0, -1) == [b"*orphan"]
    assert redis_client.zscore(K.groups[1], "orphan") == 2
    assert _lag(broker).ready == 2


@pytest.mark.parametrize("read", [0, 1, 3])
def test_past_the_groups_read_one_by_one_the_others_are_estimated_never_undercounted(
        broker: Broker, producer: Producer, monkeypatch: pytest.MonkeyPatch, read: int) -> None:
    """Groups of 5, 3 and 1 (paused) messages and one plain: read exactly, 9; past LAG_GROUPS_READ the groups not
    read count as not paused, each with a turn in the pending list: never fewer than consumers could take (9)."""
    from smqsup import defaults

    for name, n in (("a", 5), ("b", 3), ("c", 1)):
        producer.publish_many("q", [{"n": i} for i in range(n)], group=name)
    broker.groups.pause("q", "c", "test")
    producer.publish("q", "plain")
    monkeypatch.setattr(defaults, "LAG_GROUPS_READ", read)
    lag = _lag(broker)
    assert (lag.ready == 9 if read == 3 else 9 <= lag.ready <= 10) and lag.lag_s is not None
