"""Hostile Redis state against running code: keys of the wrong type, garbage
members and scores, junk locks. Nothing may lose a message, stop another
queue or take the supervisor down; each failure is a bounded log line."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from smqsup import message
from smqsup.broker import Broker
from smqsup.errors import BrokerError
from smqsup.info import ConsumerInfo
from smqsup.keys import QueueKeys
from smqsup.producer import Producer
from tests import procs
from tests.helpers import wait_for

Q = QueueKeys("smq", "q")
BAD = QueueKeys("smq", "bad")
HB = {"heartbeat_interval": "200ms", "heartbeat_timeout": "2s"}


def _wrong_type(client: "redis.Redis", key: str) -> None:
    """Replace ``key`` by a string (no smqsup key but the collector lock is one)."""
    client.set(key, "junk")


# --- scripts: refuse before any write, lose nothing -----------------------------


@pytest.mark.parametrize("victim", ["pending", "delayed", "dead"])
def test_a_nack_into_a_key_of_the_wrong_type_changes_nothing(redis_url: str, redis_client: "redis.Redis",
                                                             victim: str) -> None:
    """nack.lua refuses before it removes the frame when any list it may write to is not a list (or zset)."""
    broker = Broker(redis_url)
    broker.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.lpush(Q.processing("c1"), b"5|x")
    _wrong_type(redis_client, getattr(Q, victim))
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.nack("q", "c1", b"5|x", retry_threshold=3, delay_ms=1000, meta='{"reason":"r"}', fetch_next=False)
    assert redis_client.lrange(Q.processing("c1"), 0, -1) == [b"5|x"]


@pytest.mark.parametrize("victim", ["pending", "dead", "consumers", "heartbeats", "retired"])
def test_a_reclaim_into_a_key_of_the_wrong_type_changes_nothing(redis_url: str, redis_client: "redis.Redis",
                                                                victim: str) -> None:
    """reclaim.lua pops nothing when a key it writes to holds another type."""
    broker = Broker(redis_url)
    redis_client.lpush(Q.processing("c1"), b"0|x", b"9|y")
    _wrong_type(redis_client, getattr(Q, victim))
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.reclaim("q", "c1", costs_attempt=True, retry_threshold=3, reason="r")
    assert redis_client.lrange(Q.processing("c1"), 0, -1) == [b"9|y", b"0|x"]


def test_promote_and_dlq_requeue_into_a_pending_of_the_wrong_type_change_nothing(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """A pending key that is not a list: due delayed frames and requeued dead letters stay where they are."""
    broker = Broker(redis_url)
    redis_client.zadd(Q.delayed, {b"0|x": 0})
    redis_client.lpush(Q.dead, b'{"reason":"r"}\n3|y')
    _wrong_type(redis_client, Q.pending)
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.promote("q")
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.dlq_requeue("q", [b'{"reason":"r"}\n3|y'])
    assert redis_client.zrange(Q.delayed, 0, -1) == [b"0|x"]
    assert redis_client.lrange(Q.dead, 0, -1) == [b'{"reason":"r"}\n3|y']


def test_an_ack_with_a_pending_of_the_wrong_type_acks_and_refuses_nothing_else(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """ack.lua refuses as a whole (the frame stays held) rather than ack and then fail on the fetch."""
    broker = Broker(redis_url)
    broker.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.lpush(Q.processing("c1"), b"0|x")
    _wrong_type(redis_client, Q.pending)
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.ack("q", "c1", b"0|x", True)
    assert redis_client.lrange(Q.processing("c1"), 0, -1) == [b"0|x"]
