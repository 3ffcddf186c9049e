"""Groups' turns on the ack's hot path (ack.lua, no group limits): after a
grouped message the next item of the pending list is rotated in place, a
turn with a frame to give is honoured without reading its group's state,
and so a paused group keeps no turn in the pending list, whichever way its
turn comes back there; the scripts driven one call at a time against a real
redis-server and the Redis Cluster, as a consumer at prefetch 1 drives them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import pytest
import redis

from smqsup import message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from tests.support.inproc import NS

pytestmark = pytest.mark.topologies

K = QueueKeys(NS, "q")
READY, COUNT, STATE, RATE, WAIT, RUNNING = K.groups
#: No queue rate limit, no group limits (scripts.Rate: the queue's, then the groups').
NONE = (0, 1, 1, 0, 0, 1)


@pytest.fixture
def broker(redis_url: str) -> Iterator[Broker]:
    """A Broker with consumer c1 registered on queue q."""
    b = Broker(redis_url, NS)
    b.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    try:
        yield b
    finally:
        b.close()


def body(frame: Optional[bytes]) -> object:
    """The body of a frame a script handed out (None: none)."""
    return None if frame is None else message.decode(frame).body


def chain(broker: Broker, frame: Optional[bytes], acks: int) -> list[object]:
    """Ack ``frame`` and each next frame the ack takes, ``acks`` times; the bodies handed out, in order."""
    bodies = []
    for _ in range(acks):
        assert frame is not None
        result = broker.messages.ack("q", "c1", frame, True, NONE)
        assert result.acked
        frame = result.next_frame
        bodies.append(body(frame))
    return bodies


def no_group_left(client: redis.Redis) -> bool:
    return not client.exists(READY, COUNT, STATE, RUNNING) and client.llen(K.pending) == 0


def test_turns_after_a_grouped_ack_rotate_in_place_and_an_ungrouped_message_keeps_its_place(
        broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """A's turn, an ungrouped message, then B's: the acks hand out A's first, the ungrouped one (rotated,
    then moved on), B's, then A's others; each once, the pending list and the group keys empty at the end."""
    producer.publish_many("q", ["a1", "a2", "a3"], group="A")
    producer.publish("q", "plain")
    producer.publish("q", "b1", group="B")
    first = broker.messages.take("q", "c1", 1, NONE).frames[0]
    assert body(first) == "a1"
    assert chain(broker, first, 5) == ["plain", "b1", "a2", "a3", None]
    assert no_group_left(redis_client)
    assert redis_client.llen(K.processing("c1")) == 0


def test_pausing_a_group_takes_its_turn_out_so_the_hot_path_gives_none_of_its_messages(
        broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """A paused group's turn leaves the pending list at the pause (the acks no longer read the group's
    state): B's messages go, none of A's; resumed, A's turn comes back and its messages go too."""
    producer.publish_many("q", ["a1", "a2", "a3"], group="A")
    producer.publish_many("q", ["b1", "b2", "b3"], group="B")
    first = broker.messages.take("q", "c1", 1, NONE).frames[0]
    assert body(first) == "a1"
    assert broker.groups.pause("q", "A", by="test")
    assert redis_client.lrange(K.pending, 0, -1) == [b"*B"]
    assert redis_client.hget(STATE, "s:A") is None
    assert chain(broker, first, 4) == ["b1", "b2", "b3", None]
    assert broker.groups.resume("q", "A")
    again = broker.messages.take("q", "c1", 1, NONE).frames[0]
    assert [body(again), *chain(broker, again, 2)] == ["a2", "a3", None]
    assert no_group_left(redis_client)


@pytest.mark.parametrize("way", ["reclaimed", "given back", "put back from a paused queue"])
def test_a_paused_groups_turn_a_consumer_held_ends_instead_of_going_back(
        way: str, broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """A turn a blocking fetch moved into a consumer's list while its group was paused does not go back
    to the pending list (where an ack would redeem it unread): it ends; resumed, the group goes on."""
    producer.publish_many("q", ["a1", "a2"], group="A")
    ticket, _ = broker.messages.fetch("q", "c1", 1.0)
    assert ticket == b"*A"
    assert broker.groups.pause("q", "A", by="test")
    assert redis_client.hget(STATE, "s:A") == b"t"  # (its turn is in c1's list, not in the pending list)
    if way == "reclaimed":
        broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="test")
        broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    elif way == "given back":
        assert broker.messages.exchange("q", [scripts.give_back(K, "c1", [ticket])]) == [1]
    else:
        redis_client.set(K.paused, "{}")
        assert broker.messages.screen("q", "c1", ticket, NONE[:3])[0] == scripts.GIVEN_BACK
        redis_client.delete(K.paused)
    assert redis_client.llen(K.pending) == 0 and redis_client.llen(K.processing("c1")) == 0
    assert redis_client.hget(STATE, "s:A") is None
    assert not broker.messages.take("q", "c1", 1, NONE).frames
    assert broker.groups.resume("q", "A")
    first = broker.messages.take("q", "c1", 1, NONE).frames[0]
    assert [body(first), *chain(broker, first, 2)] == ["a1", "a2", None]
    assert no_group_left(redis_client)


def test_the_repair_takes_out_a_paused_groups_turn_left_in_the_pending_list(
        broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """A group paused with its turn left waiting (paused by an earlier version, which left it there, or
    by hand): the collector's repair takes the turn out; the group's messages stay until it is resumed."""
    producer.publish_many("q", ["a1", "a2"], group="A")
    redis_client.hset(STATE, "p:A", '{"by": "hand"}')
    assert redis_client.lrange(K.pending, 0, -1) == [b"*A"]
    redis_client.set(K.gc_lock, "me")
    broker.groups.repair("q", (K.gc_lock, "me"), 0)
    assert redis_client.llen(K.pending) == 0 and redis_client.hget(STATE, "s:A") is None
    assert redis_client.zcard(READY) == 2
    assert broker.groups.resume("q", "A")
    assert redis_client.lrange(K.pending, 0, -1) == [b"*A"]


def test_a_second_turn_written_by_hand_gives_extra_turns_never_a_message_twice(
        broker: Broker, producer: Producer, redis_client: redis.Redis) -> None:
    """Two turns of one group in the pending list (the second pushed by hand) and bytes that are no
    group's turn: the acks hand out each of the group's messages once and the bytes as they are (a
    consumer dead-letters them as malformed); the turn left over once the group ended is such bytes."""
    producer.publish_many("q", ["b1", "b2", "b3"], group="B")
    producer.publish("q", "plain")
    redis_client.lpush(K.pending, b"*B", b"*nobody")
    first = broker.messages.take("q", "c1", 1, NONE).frames[0]
    assert body(first) == "b1"
    handed = []
    frame: Optional[bytes] = first
    for _ in range(6):
        assert frame is not None
        frame = broker.messages.ack("q", "c1", frame, True, NONE).next_frame
        handed.append(frame if frame is None or frame.startswith(b"*") else body(frame))
    assert handed == ["plain", "b2", b"*nobody", "b3", b"*B", None]
    assert no_group_left(redis_client)
