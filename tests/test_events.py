"""Lifecycle events (queue option ``events``): each step of a message's life
added to its queue's capped stream by the script that makes the step, read
with Producer.events; on one Redis and on the Redis Cluster, partitioned too."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import Reject
from smqsup.client.producer import Producer
from smqsup.errors import BrokerError, MessageError
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.queues import Declared
from tests.helpers import wait_for
from tests.inproc import NS, Running

pytestmark = pytest.mark.topologies

K = QueueKeys(NS, "q")


def _declared(url: str, queue: str = "q", events_max: int = 10_000, result_ttl_s: int = 0) -> None:
    """Declare the queue's options as its consumers would, before any starts."""
    Broker(url, NS).queues.declare_options(queue, Declared(result_ttl_s, events_max))


def _until_declared(producer: Producer, queue: str = "q") -> None:
    """Wait until the producer reads that the queue's consumers declared events."""
    queues = producer._broker.queues
    wait_for(lambda: queues.partitions(queue, fresh=True) and queues.declared(queue)[1].events_max > 0)


def _of(producer: Producer, mid: str, queue: str = "q") -> list[str]:
    return [e.event for e in producer.events(queue) if e.message_id == mid]


def test_one_messages_events_come_in_order(start: Callable[..., Running], producer: Producer,
                                           redis_url: str) -> None:
    """published, started, progress, done: in that order, with its attempts; nothing for plain queues."""
    def handle(m: Any) -> str:
        m.progress(0.5)
        return "ok"
    start(handle, events=True)
    _until_declared(producer)
    mid = producer.publish("q", {"n": 1})
    wait_for(lambda: _of(producer, mid)[-1:] == ["done"])
    events = [e for e in producer.events("q") if e.message_id == mid]
    assert [e.event for e in events] == ["published", "started", "progress", "done"]
    assert [e.attempts for e in events] == [0, 0, 0, 0]
    assert events[2].data == 0.5 and events[0].at_ms <= events[-1].at_ms
    assert [e.cursor for e in events] == sorted((e.cursor for e in events), key=lambda c: tuple(map(int, c.split("-"))))


def test_retries_and_death_are_events_with_the_reason(start: Callable[..., Running], producer: Producer,
                                                      redis_url: str) -> None:
    """A handler that fails twice then Rejects: retried, retried, dead with its reason in data."""
    _declared(redis_url)
    def handle(m: Any) -> None:
        if m.attempts < 2:
            raise RuntimeError("boom")
        raise Reject("no")
    start(handle, events=True, retry_delay_s=0)
    mid = producer.publish("q", 1)
    wait_for(lambda: _of(producer, mid)[-1:] == ["dead"])
    events = [e for e in producer.events("q") if e.message_id == mid]
    assert [e.event for e in events] == ["published", "started", "retried", "started", "retried", "started", "dead"]
    assert events[-1].data["reason"].startswith("rejected")
