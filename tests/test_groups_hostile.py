"""Message groups against bytes nobody planned for: each group key of the
wrong type, garbage values in them, counts left wrong by hand; the queue
goes on, nothing is lost, and the elected collector's repair (every
GROUP_REPAIR_S) gives the groups their turns back; against a real
redis-server and the Redis Cluster, consumers and a collector in threads."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import defaults
from smqsup.client.producer import Producer
from smqsup.errors import PublishRefused
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.helpers import holds, wait_for
from tests.support.inproc import NS, Running

pytestmark = pytest.mark.topologies

K = QueueKeys(NS, "q")
READY, COUNT, STATE, RATE, WAIT, RUNNING = K.groups
#: The longest a lost turn waits for the collector's repair, with room for a loaded machine.
REPAIR_WAIT_S = defaults.GROUP_REPAIR_S + 5


class Handled:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[Any] = []

    def __call__(self, msg: Any) -> None:
        with self.lock:
            self.bodies.append(msg.body)

    def count(self) -> int:
        with self.lock:
            return len(self.bodies)


@pytest.mark.parametrize("key", [COUNT, STATE, RATE, WAIT, RUNNING], ids=["count", "state", "rate", "wait", "running"])
def test_a_group_key_of_the_wrong_type_stops_no_queue_and_loses_nothing(
        key: str, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A string where a group key should be: ungrouped messages go on at once, grouped ones are handled (or,
    with the state hash unusable, wait), and once the key is deleted every one is handled exactly once."""
    redis_client.set(key, "garbage")
    producer.publish_many("q", ["g1", "g2", "g3"], group="g")
    producer.publish_many("q", ["u1", "u2", "u3"])
    handled = Handled()
    start(handled, group_concurrency=2, group_rate_limit_per_s=1000.0)
    wait_for(lambda: {"u1", "u2", "u3"} <= set(handled.bodies), timeout_s=10)
    redis_client.delete(key)
    wait_for(lambda: handled.count() >= 6, timeout_s=REPAIR_WAIT_S, message=f"handled {handled.bodies}")
    assert sorted(handled.bodies) == ["g1", "g2", "g3", "u1", "u2", "u3"]


def test_a_group_key_of_the_wrong_type_is_said_once_naming_it_and_shown_by_status(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, redis_url: str,
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state hash a string: the collector says so once (not at every repair), naming the key; status
    --json and the table show it; once deleted, the collector says it is repaired and status shows nothing."""
    monkeypatch.setattr(defaults, "GROUP_REPAIR_S", 0.1)
    caplog.set_level(logging.INFO, logger="smqsup.collector.collector")
    redis_client.set(STATE, "garbage")
    producer.publish("q", "g1", group="g")
    start(Handled())

    def said(word: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if STATE in r.getMessage() and word in r.getMessage()]
    wait_for(lambda: said("wait"), timeout_s=10)
    holds(lambda: len(said("wait")) == 1, 1.0)  # about ten repairs
    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    assert snap["queues"]["q"]["wrong_type_keys"] == [f"{STATE} holds a string, not a hash"]
    assert f"q: {STATE} holds a string, not a hash" in procs.run("status", "--url", redis_url).stdout
    redis_client.delete(STATE)
    wait_for(lambda: said("repaired"), timeout_s=10)
    assert json.loads(procs.run("status", "--url", redis_url, "--json").stdout)["queues"]["q"]["wrong_type_keys"] == []


def test_a_ready_set_of_the_wrong_type_refuses_grouped_publishes_only(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """The groups' ready set holds a string: a grouped publish is refused with Redis's WRONGTYPE (nothing
    queued), an ungrouped one goes through and is handled."""
    redis_client.set(READY, "garbage")
    with pytest.raises(PublishRefused, match="WRONGTYPE"):
        producer.publish("q", "g", group="g")
    producer.publish("q", "u")
    handled = Handled()
    start(handled)
    wait_for(lambda: handled.bodies == ["u"], timeout_s=10)


@pytest.mark.parametrize("junk", [b"abc", b"-5", b"1e308", b"nan", b"99999999999999999999"])
def test_a_running_count_that_is_garbage_or_too_high_is_recounted(
        junk: bytes, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """group_concurrency 1 and a running count written by hand (garbage, negative, huge): the group runs at
    once (garbage reads as none) or, blocked by a count too high, after the collector's recount; its count
    is gone at the end."""
    redis_client.hset(RUNNING, "g", junk)
    producer.publish_many("q", [1, 2, 3], group="g")
    handled = Handled()
    start(handled, group_concurrency=1)
    wait_for(lambda: handled.count() == 3, timeout_s=REPAIR_WAIT_S, message=f"handled {handled.bodies}")
    wait_for(lambda: not redis_client.hexists(RUNNING, "g"), timeout_s=REPAIR_WAIT_S)


@pytest.mark.parametrize("state", [b"zzz", b"t", b"b", b"w", b""])
def test_a_state_written_by_hand_costs_a_turn_until_the_repair(
        state: bytes, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """A group whose state says it has a turn (or is blocked, or waits for its rate) when it has none:
    the repair gives it its turn back, and its messages are handled once each."""
    producer.publish_many("q", [1, 2], group="g")
    redis_client.lrem(K.pending, 0, "*g")  # its turn gone
    redis_client.hset(STATE, "s:g", state)
    handled = Handled()
    start(handled)
    wait_for(lambda: handled.count() == 2, timeout_s=REPAIR_WAIT_S, message=f"handled {handled.bodies}")
    assert sorted(handled.bodies) == [1, 2]


@pytest.mark.parametrize("limits", [{}, {"group_rate_limit_per_s": 100.0}], ids=["no limits", "group rate"])
def test_forged_tickets_and_rate_entries_are_harmless(limits: dict[str, Any], start: Callable[..., Running],
                                                      producer: Producer, redis_client: redis.Redis) -> None:
    """Bytes in the pending list that look like a group's turn but no group gave out are dead-lettered as
    malformed, never dropped silently (without group limits too, where the hot path redeems turns); a
    rate entry of +inf is read as the furthest this limit books."""
    redis_client.lpush(K.pending, b"*nobody", b"*", b"*\xff\xfe")
    redis_client.zadd(RATE, {"g": float("inf")})
    producer.publish_many("q", [1, 2], group="g")
    handled = Handled()
    start(handled, **limits)
    wait_for(lambda: handled.count() == 2 and redis_client.llen(K.dead) == 3, timeout_s=10,
             message=f"handled {handled.bodies}, dead {redis_client.llen(K.dead)}")
    assert all(b"malformed" in entry for entry in redis_client.lrange(K.dead, 0, -1))


def test_a_turn_given_twice_and_a_paused_group_in_one_take_hand_out_each_message_once(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, redis_url: str) -> None:
    """Takes of 10 redeem several groups' turns at once: a second turn of one group pushed by hand among
    them, and a paused group's turn, hand out no message twice and none of the paused group's; resumed,
    its messages go too."""
    from smqsup.store.broker import Broker

    for g in "abc":
        producer.publish_many("q", [f"{g}{i}" for i in range(3)], group=g)
    broker = Broker(redis_url, NS)
    try:
        assert broker.groups.pause("q", "a", by="test")
        redis_client.lpush(K.pending, b"*b")  # a second turn of b, behind every other
        handled = Handled()
        start(handled, prefetch=10)
        wait_for(lambda: handled.count() >= 6, timeout_s=10, message=f"handled {handled.bodies}")
        assert sorted(handled.bodies) == ["b0", "b1", "b2", "c0", "c1", "c2"]
        assert broker.groups.resume("q", "a")
        wait_for(lambda: handled.count() >= 9, timeout_s=REPAIR_WAIT_S, message=f"handled {handled.bodies}")
    finally:
        broker.close()
    assert sorted(handled.bodies) == ["a0", "a1", "a2", "b0", "b1", "b2", "c0", "c1", "c2"]


def test_garbage_members_in_a_groups_ready_range_are_dead_lettered_and_its_messages_handled_once(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Members written by hand into a group's range of the ready set (one shorter than the layout, one
    whose frame is no frame): the acks' turns hand them out as bytes, a consumer dead-letters them as
    malformed, and the group's own messages are handled once each; no group key is left."""
    producer.publish_many("q", [1, 2], group="g")
    redis_client.zadd(READY, {b"1:g\tx": 0, b"1:g\t9999999999999999\nnot a frame": 0})
    handled = Handled()
    start(handled)
    wait_for(lambda: handled.count() == 2 and redis_client.llen(K.dead) == 2, timeout_s=10,
             message=f"handled {handled.bodies}, dead {redis_client.llen(K.dead)}")
    assert sorted(handled.bodies) == [1, 2]
    assert all(b"malformed" in entry for entry in redis_client.lrange(K.dead, 0, -1))
    wait_for(lambda: not redis_client.exists(READY, COUNT, STATE) and redis_client.llen(K.pending) == 0)
