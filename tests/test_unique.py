"""Unique until done (dedup_until): a dedup key held until its message ends,
or starts, through retries and reclaims; on one Redis and the Cluster."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import MessageFailed, Reject, Retry
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys
from tests.support.helpers import wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]


def test_a_key_held_until_done_refuses_copies_while_waiting_and_running(start: Callable[..., Running],
                                                                      producer: Producer) -> None:
    """While the first message waits and while it runs, the same key returns its id; once done, a new one queues."""
    gate, running = threading.Event(), threading.Event()

    def handle(m: Any) -> Any:
        running.set()
        gate.wait(10)
        return m.body
    first = producer.publish("q", 1, dedup_key="k", dedup_until="done", result_ttl=60)
    assert producer.publish("q", 2, dedup_key="k", dedup_until="done") == first
    assert producer.publish("q", 3, dedup_key="k") == first  # a dedup_ttl publisher sees the hold too
    start(handle)
    running.wait(10)
    assert producer.publish("q", 4, dedup_key="k", dedup_until="done") == first
    gate.set()
    assert producer.result("q", first, timeout=10) == 1
    second = wait_for(lambda: (m := producer.publish("q", 5, dedup_key="k", dedup_until="done", result_ttl=60)) != first and m)
    assert producer.result("q", second, timeout=10) == 5


def test_a_retry_keeps_the_key_held_and_a_dead_letter_frees_it(start: Callable[..., Running],
                                                              producer: Producer) -> None:
    """A message retried twice holds its key throughout; one that dies frees it."""
    attempts: list[int] = []

    def handle(m: Any) -> Any:
        attempts.append(m.attempts)
        if m.body == "retry" and m.attempts < 2:
            raise Retry(delay=0.2)
        if m.body == "die":
            raise Reject("no")
        return m.attempts
    start(handle, retry_threshold=5)
    mid = producer.publish("q", "retry", dedup_key="r", dedup_until="done", result_ttl=60)
    wait_for(lambda: len(attempts) >= 1)
    assert producer.publish("q", "copy", dedup_key="r", dedup_until="done") == mid
    assert producer.result("q", mid, timeout=10) == 2
    dead = producer.publish("q", "die", dedup_key="d", dedup_until="done", result_ttl=60)
    with pytest.raises(MessageFailed):
        producer.result("q", dead, timeout=10)
    assert producer.publish("q", "after", dedup_key="d", dedup_until="done") != dead


def test_a_key_held_until_start_is_free_while_its_message_runs(start: Callable[..., Running],
                                                             producer: Producer) -> None:
    """dedup_until="start": a copy is refused while the first waits, and queued once it started."""
    gate, running = threading.Event(), threading.Event()

    def handle(m: Any) -> Any:
        running.set()
        gate.wait(10)
    first = producer.publish("q", 1, dedup_key="s", dedup_until="start")
    assert producer.publish("q", 2, dedup_key="s", dedup_until="start") == first
    start(handle)
    running.wait(10)
    second = wait_for(lambda: (m := producer.publish("q", 3, dedup_key="s", dedup_until="start")) != first and m)
    assert second != first
    gate.set()


def test_publish_many_holds_each_key_and_a_cancel_frees_it(producer: Producer, redis_client: redis.Redis) -> None:
    """publish_many with dedup_until: one message per key; cancelling a waiting one frees its key, and only its."""
    ids = producer.publish_many("q", [1, 2, 3], dedup_key=["a", "b", "a"], dedup_until="done", result_ttl=60)
    assert ids[0] == ids[2] != ids[1]
    assert producer.cancel("q", ids[1]) == "cancelled"
    assert producer.publish("q", 4, dedup_key="b", dedup_until="done") != ids[1]
    assert producer.publish("q", 5, dedup_key="a", dedup_until="done") == ids[0]


@pytest.mark.parametrize("kwargs, match", [
    ({"dedup_until": "forever", "dedup_key": "k"}, "dedup_until"),
    ({"dedup_until": "done"}, "without dedup_key"),
    ({"dedup_until": "done", "dedup_key": "k", "dedup_ttl": 5}, "not with dedup_ttl"),
    ({"dedup_until": 1, "dedup_key": "k"}, "dedup_until"),
    ({"dedup_until": "DONE", "dedup_key": "k"}, "dedup_until"),
])
def test_hostile_dedup_until_is_one_line(producer: Producer, redis_client: redis.Redis, kwargs: dict[str, Any],
                                         match: str) -> None:
    """Bad values, no key, with a dedup_ttl: MessageError, nothing sent."""
    with pytest.raises(MessageError, match=match):
        producer.publish("q", 1, **kwargs)
    assert redis_client.llen(QueueKeys(NS, "q").pending) == 0


def test_keys_with_odd_bytes_do_not_collide(producer: Producer) -> None:
    """Keys that are prefixes of each other, with tabs, newlines and non-ASCII, each hold their own message."""
    keys = ["a", "a\tb", "a\t", "a\nb", "é", "a" * 200, "\t"]
    ids = [producer.publish("q", i, dedup_key=key, dedup_until="done") for i, key in enumerate(keys)]
    assert len(set(ids)) == len(keys)
    assert [producer.publish("q", "again", dedup_key=key, dedup_until="done") for key in keys] == ids
