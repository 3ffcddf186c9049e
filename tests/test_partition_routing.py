"""Where a partitioned queue's producers put messages: in turn, by
partition key, by group, by dedup key (and how far a dedup key holds when a
group or partition key picks the partition); priorities and delays within a
partition; hostile partition keys. On one redis-server and on a Redis
Cluster, from the Producer and the AsyncProducer."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import keys as keys_mod
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from tests.support.helpers import redis_ms, wait_for
from tests.support.inproc import NS, Running
from tests.test_publish_options import recorder

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]

PARTS = ["q", "q~1", "q~2"]


def declare(redis_url: str, count: int = 3) -> Broker:
    """Queue "q" of ``count`` partitions (PARTS), as its supervisors declare it; a Broker on it."""
    broker = Broker(redis_url, NS)
    assert broker.queues.declare_partitions("q", count) == count
    return broker


def pending_sizes(client: Any) -> list[int]:
    """The length of each partition's pending list, in PARTS' order."""
    return [client.llen(QueueKeys(NS, p).pending) for p in PARTS]


def test_a_producer_spreads_messages_over_the_partitions_in_turn(redis_url: str, redis_client: redis.Redis,
                                                                 producer: Producer) -> None:
    """Without a key, messages go to the partitions in turn: 3 partitions, 300 messages, 100 each."""
    declare(redis_url)
    for i in range(300):
        producer.publish("q", i)
    assert pending_sizes(redis_client) == [100, 100, 100]
    producer.publish_many("q", list(range(30)))  # a batch is spread: 10 to each
    assert pending_sizes(redis_client) == [110, 110, 110]


def test_publish_many_spreads_over_the_partitions_and_a_group_keeps_to_its_own(
        redis_url: str, redis_client: redis.Redis, producer: Producer, topology: str) -> None:
    """3,000 messages in one publish_many land 1,000 on each partition (on the cluster: on each master, a
    partition's hash tag on a master of its own); 100 with a group all land in the group's partition, the
    one its name's CRC-32 picks (as pause --group finds it)."""
    declare(redis_url)
    producer.publish_many("q", list(range(3000)))
    assert pending_sizes(redis_client) == [1000, 1000, 1000]
    if topology == "cluster":
        masters = {redis_client.get_node_from_key(QueueKeys(NS, p).pending).name for p in PARTS}  # type: ignore[attr-defined]
        assert len(masters) == 3, "the three partitions should live on three masters"
    producer.publish_many("q", list(range(100)), group="tenant-7")
    home = PARTS[zlib.crc32(b"tenant-7") % 3]
    assert redis_client.zcard(QueueKeys(NS, home).groups[0]) == 100
    assert sum(redis_client.zcard(QueueKeys(NS, p).groups[0]) for p in PARTS) == 100
    broker = Broker(redis_url, NS)
    try:
        assert broker.groups.partition("q", "tenant-7") == home
    finally:
        broker.close()


def test_a_partition_key_keeps_related_messages_in_order_in_one_partition(
        redis_url: str, redis_client: redis.Redis, producer: Producer, start: Callable[..., Running]) -> None:
    """Messages with one partition_key land in CRC-32(key) % N and are handled in publish order."""
    declare(redis_url)
    ids = [producer.publish("q", i, partition_key="order-42") for i in range(50)]
    where = PARTS[zlib.crc32(b"order-42") % 3]
    assert redis_client.llen(QueueKeys(NS, where).pending) == 50
    seen: list[str] = []
    start(lambda m: seen.append(m.id), partitions=3)
    wait_for(lambda: len(seen) == 50)
    assert seen == ids


def test_priorities_and_delays_keep_their_meaning_within_a_partition(
        redis_url: str, redis_client: redis.Redis, producer: Producer, start: Callable[..., Running]) -> None:
    """Within one partition (one partition key): a priority-9 message published after 200 of priority 0 is
    handled first, and one delayed 0.6 s waits in that partition's delayed set until the Redis clock says
    it is due, then is handled within a second."""
    declare(redis_url)
    where = QueueKeys(NS, PARTS[zlib.crc32(b"k") % 3])
    producer.publish_many("q", list(range(200)), partition_key="k")
    producer.publish("q", "urgent", priority=9, partition_key="k")
    before = redis_ms(redis_client)
    producer.publish("q", "later", delay=0.6, partition_key="k")
    assert redis_client.zcard(where.scheduled) == 1 and redis_client.zcard(where.priority) == 1
    seen: list[tuple[Any, int]] = []
    start(recorder(seen, redis_client), partitions=3)
    wait_for(lambda: len(seen) == 202, timeout_s=20)
    assert [b for b, _ in seen] == ["urgent", *range(200), "later"]
    assert before + 600 <= seen[-1][1] <= before + 1600


def test_dedup_keys_deduplicate_across_a_partitioned_queue(redis_url: str, producer: Producer) -> None:
    """A dedup key picks the partition, so a second publish with the key finds the first, whatever the turn."""
    declare(redis_url)
    first = producer.publish("q", 1, dedup_key="k")
    assert [producer.publish("q", 2, dedup_key="k") for _ in range(5)] == [first] * 5
    ids = producer.publish_many("q", [1, 2, 3, 4], dedup_key=["a", "b", "c", "a"])
    assert ids[3] == ids[0] and len(set(ids)) == 3
    assert Broker(redis_url, NS).statistics.total_sizes("q")["pending"] == 4


@pytest.mark.parametrize("bad", [None, "", 5, b"k", "x" * 100_000, "\ud800"])
def test_a_hostile_partition_key_is_refused_before_anything_is_sent(bad: Any, producer: Producer,
                                                                     redis_url: str) -> None:
    """partition_key must be 1..N bytes of UTF-8 text; anything else is a MessageError naming it."""
    declare(redis_url)
    if bad is None:
        producer.publish("q", 1, partition_key=bad)  # None: no key, the next partition in turn
        return
    with pytest.raises(MessageError, match="partition_key"):
        producer.publish("q", 1, partition_key=bad)
    with pytest.raises(MessageError, match="partition_key"):
        producer.publish_many("q", [1], partition_key=bad)
    assert Broker(redis_url, NS).statistics.total_sizes("q")["pending"] == 0


def test_partition_names_cannot_collide_with_queue_names() -> None:
    """A partition's queue holds '~', which no queue name may."""
    from smqsup.config.names import validate_queue_name
    assert keys_mod.partition_names("q", 3) == PARTS and keys_mod.logical_name("q~2") == "q"
    with pytest.raises(Exception, match="1 to 128 characters"):
        validate_queue_name("q~1")


def test_a_dedup_key_holds_within_the_partition_its_message_goes_to(redis_url: str, producer: Producer) -> None:
    """With a group (or a partition key) picking the partition, a dedup key holds among the messages that go to
    that partition: the same key in a group of another partition queues again, in the same group it does not,
    and without a group or partition key it holds queue-wide (it picks the partition itself)."""
    declare(redis_url)
    apart = [g for g in ("g", "h", "i", "j") if zlib.crc32(g.encode()) % 3 != zlib.crc32(b"g") % 3][0]
    first = producer.publish("q", 1, dedup_key="k", group="g")
    assert producer.publish("q", 2, dedup_key="k", group="g") == first
    other = producer.publish("q", 3, dedup_key="k", group=apart)
    assert other != first
    keyed = producer.publish("q", 4, dedup_key="k2", partition_key="p")
    assert producer.publish("q", 5, dedup_key="k2", partition_key="p") == keyed
    assert Broker(redis_url, NS).statistics.total_sizes("q")["pending"] == 3
