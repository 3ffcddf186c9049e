"""Hostile publish options, handler verdicts and bytes in the new keys
(priority set, scheduled set, dedup keys, paused flag): each refused in one
line before anything is sent, or survived without losing a message."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import Retry, deadletter, message
from smqsup.client.producer import Producer
from smqsup.errors import MessageError, PublishRefused
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from tests.support.helpers import wait_for
from tests.support.inproc import NS, Running

pytestmark = pytest.mark.both_clients

K = QueueKeys(NS, "q")
NAN = float("nan")


@pytest.mark.parametrize(("options", "named"), [
    ({"delay": NAN}, "delay"), ({"delay": -1}, "delay"), ({"delay": float("inf")}, "delay"),
    ({"delay": 10 ** 400}, "delay"), ({"delay": True}, "delay"), ({"delay": "5s"}, "delay"),
    ({"delay": dt.timedelta(days=-1)}, "delay"), ({"delay": 3651 * 86400}, "delay"),
    ({"at": dt.datetime(2030, 1, 1)}, "at"), ({"at": -1}, "at"), ({"at": NAN}, "at"), ({"at": 10 ** 400}, "at"),
    ({"at": "2030-01-01"}, "at"), ({"at": 1e300}, "at"), ({"delay": 1, "at": 1}, "delay and at"),
    ({"priority": 10}, "priority"), ({"priority": -1}, "priority"), ({"priority": True}, "priority"),
    ({"priority": 1.5}, "priority"), ({"priority": "9"}, "priority"), ({"priority": 10 ** 400}, "priority"),
    ({"dedup_key": ""}, "dedup_key"), ({"dedup_key": "x" * 513}, "dedup_key"), ({"dedup_key": "é" * 257}, "dedup_key"),
    ({"dedup_key": "\udcff"}, "dedup_key"), ({"dedup_key": b"k"}, "dedup_key"), ({"dedup_key": 5}, "dedup_key"),
    ({"dedup_key": "k", "dedup_ttl": 0}, "dedup_ttl"), ({"dedup_key": "k", "dedup_ttl": NAN}, "dedup_ttl"),
    ({"dedup_ttl": 5}, "dedup_ttl"), ({"ttl": 0}, "ttl"), ({"ttl": -5}, "ttl"), ({"ttl": NAN}, "ttl"),
    ({"ttl": 10 ** 400}, "ttl"), ({"result_ttl": -1}, "result_ttl"), ({"result_ttl": NAN}, "result_ttl"),
    ({"result_ttl": float("inf")}, "result_ttl"), ({"result_ttl": 10 ** 400}, "result_ttl"),
    ({"result_ttl": 100_000_000}, "result_ttl"), ({"result_ttl": True}, "result_ttl"),
    ({"result_ttl": "1h"}, "result_ttl"), ({"result_ttl": dt.timedelta(seconds=-1)}, "result_ttl"),
])
def test_a_bad_publish_option_is_one_line_naming_it_and_sends_nothing(
        producer: Producer, redis_client: redis.Redis, options: dict[str, Any], named: str) -> None:
    """Every hostile keyword value is a MessageError of one bounded line naming the keyword; nothing is queued."""
    for publish in (lambda: producer.publish("q", 1, **options), lambda: producer.publish_many("q", [1, 2], **options)):
        with pytest.raises(MessageError) as err:
            publish()
        text = str(err.value)
        assert text.startswith(named) and "\n" not in text and len(text) < 300
    assert redis_client.dbsize() == 0


@pytest.mark.parametrize("keys", [["a"], ["a", "b", "c"], b"ab", [1, 2], ["", "b"], 7])
def test_publish_many_refuses_dedup_keys_that_do_not_fit_its_bodies(producer: Producer, keys: Any) -> None:
    """A dedup key list of the wrong length, or holding anything but keys, is refused before sending."""
    with pytest.raises(MessageError, match="dedup_key"):
        producer.publish_many("q", [1, 2], dedup_key=keys)


@pytest.mark.parametrize("delay", [NAN, -1, 10 ** 400, "soon", dt.timedelta(days=4000)])
def test_a_bad_retry_delay_fails_the_handler_with_that_error(delay: Any) -> None:
    """Retry(delay=<hostile>) raises MessageError where it is made: the handler fails like any other."""
    with pytest.raises(MessageError, match=r"Retry\(delay"):
        Retry(delay=delay)


def test_a_dedup_key_of_the_wrong_type_refuses_the_publish_and_queues_nothing(
        producer: Producer, redis_client: redis.Redis) -> None:
    """A dedup key holding a hash (written by anyone): PublishRefused, nothing of that call queued."""
    redis_client.hset(K.dedup("k"), "x", "y")
    with pytest.raises(PublishRefused, match="WRONGTYPE"):
        producer.publish_many("q", [1, 2], dedup_key=["free", "k"])
    assert redis_client.llen(K.pending) == 0 and not redis_client.exists(K.dedup("free"))


def test_garbage_in_the_priority_counter_costs_order_never_a_message(producer: Producer,
                                                                     redis_client: redis.Redis) -> None:
    """priority:seq holding text: priority publishes still queue every message."""
    redis_client.set(K.priority_seq, "not a number")
    producer.publish("q", "first")
    producer.publish_many("q", [1, 2, 3], priority=4)
    assert redis_client.llen(K.pending) + redis_client.zcard(K.priority) == 4


@pytest.mark.parametrize("key", ["priority", "scheduled"])
def test_a_priority_or_scheduled_key_of_the_wrong_type_refuses_without_loss(redis_url: str,
        producer: Producer, redis_client: redis.Redis, key: str) -> None:
    """The set replaced by a string: the publish is refused; a consumer's take is refused, its list untouched."""
    redis_client.set(getattr(K, key), "garbage")
    with pytest.raises(PublishRefused, match="WRONGTYPE"):
        producer.publish("q", 1, priority=3, delay=1 if key == "scheduled" else None)
    producer.publish("q", "plain")
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    if key == "priority":
        with pytest.raises(Exception, match="WRONGTYPE"):
            broker.messages.take("q", "c")
        assert redis_client.llen(K.pending) == 1
    else:
        assert broker.messages.take("q", "c").next_frame is not None


@pytest.mark.parametrize("frame", [b"0:9:1|not json", b"7:0:0|{}", b"0:x:1|{}", b"0:1:1234567890123456|x",
                                   b"\xff:\xfe|", b"", b"0:9:99999999999999|" + b"[" * 5000])
def test_forged_frames_in_the_priority_and_scheduled_sets_are_dead_lettered_or_handled(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, frame: bytes) -> None:
    """Whatever bytes sit in the new sets, the consumer goes on and each one ends handled or dead-lettered."""
    redis_client.zadd(K.scheduled, {frame: 0})
    redis_client.zadd(K.priority, {frame + b" ": 1})
    seen: list[Any] = []
    start(lambda m: seen.append(m.body))
    producer.publish("q", "after")
    wait_for(lambda: len(seen) + redis_client.llen(K.dead) == 3, timeout_s=10)
    assert "after" in seen and redis_client.zcard(K.scheduled) == 0 and redis_client.zcard(K.priority) == 0
    dead = [deadletter.DeadLetter(e).reason for e in redis_client.lrange(K.dead, 0, -1)]
    assert all(r in ("malformed", "expired") for r in dead)


def test_a_paused_flag_of_any_type_pauses_and_resume_clears_it(redis_url: str, producer: Producer,
                                                               redis_client: redis.Redis) -> None:
    """Anyone's value at the paused key means paused (EXISTS); resume deletes whatever it is."""
    redis_client.hset(K.paused, "x", "1")
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    producer.publish("q", 1)
    assert broker.messages.take("q", "c").paused and redis_client.llen(K.pending) == 1
    assert broker.queues.resume("q") and broker.messages.take("q", "c").next_frame is not None


def test_a_huge_dedup_key_and_an_odd_one_are_keys_like_any_other(producer: Producer,
                                                                 redis_client: redis.Redis) -> None:
    """512 bytes, braces, colons, newlines: the key stays under the queue's hash tag and works."""
    for key in ("k" * 512, "}{ns}:x", "a\nb", "é" * 256, "{q}"):
        first = producer.publish("q", key, dedup_key=key)
        assert producer.publish("q", key, dedup_key=key) == first
        assert redis_client.get(K.dedup(key)) == first.encode()
    assert redis_client.llen(K.pending) == 5


@pytest.mark.parametrize("score", ["+inf", "-inf", str(10 * 2 ** 44), "-1e300"])
def test_a_priority_member_with_a_score_no_script_wrote_is_still_taken_and_listed(redis_url: str,
        producer: Producer, redis_client: redis.Redis, score: str) -> None:
    """Anyone's ZADD with +inf or a huge score: the member is listed and taken, never stuck."""
    from smqsup.views import browse
    producer.publish("q", "plain")
    redis_client.zadd(K.priority, {b'0:5:0|{"id":"odd","queue":"q","body":"odd","created_at":0}': float(score)})
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c", ConsumerInfo(pid=1, host="h", queue="q", started_at=0))
    assert {r["id"] for r in browse.listing(broker, "q", "pending", 10)} >= {"odd"}
    taken = [broker.messages.take("q", "c").next_frame for _ in range(3)]
    assert taken[2] is None and sorted(message.decode(f).body for f in taken[:2] if f) == ["odd", "plain"]


def test_an_int_enum_priority_is_a_plain_int() -> None:
    """priority=IntEnum member: accepted as its int value, never a driver error."""
    import enum

    from smqsup.client import options

    class P(enum.IntEnum):
        HIGH = 7
    assert options.priority(P.HIGH) == 7 and type(options.priority(P.HIGH)) is int
