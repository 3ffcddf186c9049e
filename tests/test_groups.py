"""Message groups (publish(group=...)): the consumers of a queue take from
its groups in turn, group_concurrency bounds one group's messages in
consumers' lists, group_rate_limit its starts; against a real redis-server
and the Redis Cluster, with consumers and a collector in threads."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import framing
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]

K = QueueKeys(NS, "q")


class Seen:
    """What handlers saw: (group, body) in start order, and the most of one
    group running at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.order: list[tuple[Any, Any]] = []
        self.running: dict[Any, int] = {}
        self.most: dict[Any, int] = {}

    def begin(self, msg: Any) -> None:
        with self.lock:
            self.order.append((msg.group, msg.body))
            n = self.running[msg.group] = self.running.get(msg.group, 0) + 1
            self.most[msg.group] = max(self.most.get(msg.group, 0), n)

    def end(self, msg: Any) -> None:
        with self.lock:
            self.running[msg.group] -= 1


def test_groups_take_turns_one_message_each(start: Callable[..., Running], producer: Producer) -> None:
    """A has 30 waiting before B and C publish 3 each: one consumer takes A, B, C in turn, so every B and
    C message starts among the first 9, and each group keeps its own order."""
    seen = Seen()
    producer.publish_many("q", list(range(30)), group="A")
    for g in "BC":
        producer.publish_many("q", list(range(3)), group=g)
    start(seen.begin, prefetch=1)
    wait_for(lambda: len(seen.order) == 36, timeout_s=10)
    firsts = seen.order[:9]
    assert sorted(g for g, _ in firsts) == ["A"] * 3 + ["B"] * 3 + ["C"] * 3, firsts
    for g, count in (("A", 30), ("B", 3), ("C", 3)):
        assert [b for gg, b in seen.order if gg == g] == list(range(count))


def test_priorities_order_a_group_and_ungrouped_messages_take_their_turns(
        start: Callable[..., Running], producer: Producer) -> None:
    """Within a group the higher priority goes first; ungrouped messages keep their own order beside the
    groups' turns, and the handler sees no group for them."""
    seen = Seen()
    producer.publish("q", "low", group="A")
    producer.publish("q", "high", group="A", priority=5)
    producer.publish_many("q", ["u1", "u2"])
    start(seen.begin, prefetch=1)
    wait_for(lambda: len(seen.order) == 4, timeout_s=10)
    grouped = [b for g, b in seen.order if g == "A"]
    assert grouped == ["high", "low"]
    assert [b for g, b in seen.order if g is None] == ["u1", "u2"]


@pytest.mark.parametrize("concurrency", [8])
def test_group_concurrency_is_never_exceeded(concurrency: int, start: Callable[..., Running],
                                             producer: Producer, redis_client: redis.Redis) -> None:
    """group_concurrency 2 with 2 consumers of 8 threads: never more than 2 of one group at once, and every
    message handled; the groups' running counts are back to none at the end."""
    seen = Seen()
    gate = threading.Event()

    def handle(msg: Any) -> None:
        seen.begin(msg)
        gate.wait(0.02)
        seen.end(msg)
    for g in ("A", "B", "C"):
        producer.publish_many("q", list(range(20)), group=g)
    start(handle, concurrency=concurrency, group_concurrency=2)
    start(handle, concurrency=concurrency, group_concurrency=2)
    wait_for(lambda: len(seen.order) == 60, timeout_s=20)
    assert max(seen.most.values()) <= 2, seen.most
    assert max(seen.most.values()) == 2, seen.most  # the limit is reached, not merely respected
    wait_for(lambda: not redis_client.hgetall(K.groups[2]) and not redis_client.hgetall(K.groups[5]), timeout_s=5,
             message="group state left behind")


def test_a_failed_grouped_message_is_retried_in_its_group(start: Callable[..., Running],
                                                          producer: Producer) -> None:
    """A handler that fails once: the retry goes back to its group (it keeps its group) and runs again."""
    tries: list[Any] = []

    def handle(msg: Any) -> None:
        tries.append((msg.group, msg.attempts))
        if msg.attempts == 0:
            raise RuntimeError("once")
    producer.publish("q", 1, group="g1")
    start(handle, retry_delay_s=0.0, group_concurrency=1)
    wait_for(lambda: len(tries) == 2, timeout_s=10)
    assert tries == [("g1", 0), ("g1", 1)]


def test_a_reclaimed_grouped_message_frees_its_slot(redis_url: str, producer: Producer,
                                                    redis_client: redis.Redis) -> None:
    """A consumer takes a grouped message and is reclaimed before it settles: the group's slot is free
    again and the message back in its group; a second take gets it."""
    broker = Broker(redis_url, NS)
    try:
        broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
        producer.publish("q", "x", group="g")
        rate = (0, 1, 1, 1, 0, 1)
        took = broker.messages.take("q", "c1", 5, rate)
        assert len(took.frames) == 1
        assert redis_client.hget(K.groups[5], "g") == b"1"
        assert not broker.messages.take("q", "c1", 5, rate).frames  # at its limit: nothing more
        broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="killed")
        assert redis_client.hget(K.groups[5], "g") is None
        broker.registry.register_consumer("q", "c2", ConsumerInfo(pid=2))
        again = broker.messages.take("q", "c2", 5, rate)
        assert len(again.frames) == 1 and again.frames[0].endswith(b"g")
    finally:
        broker.close()


@pytest.mark.parametrize("settle", ["ack", "retry", "delay", "dead-letter"])
def test_a_settled_grouped_message_frees_its_slot_at_once(settle: str, redis_url: str, producer: Producer,
                                                          redis_client: redis.Redis) -> None:
    """group_concurrency 1: the script that acks, retries, delays or dead-letters the group's message in hand
    frees the group's slot itself (no repair runs here): the next take gets the group's next message."""
    broker = Broker(redis_url, NS)
    try:
        broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
        producer.publish_many("q", ["a", "b"], group="g")
        rate = (0, 1, 1, 1, 0, 1)
        [frame] = broker.messages.take("q", "c1", 5, rate).frames
        assert not broker.messages.take("q", "c1", 5, rate).frames  # at its limit: nothing more
        if settle == "ack":
            broker.messages.ack("q", "c1", frame, False, rate)
        else:
            broker.messages.nack("q", "c1", frame, retry_threshold=-1 if settle == "dead-letter" else 3,
                                 delay_ms=60_000 if settle == "delay" else 0, meta=scripts.meta_json("failed"),
                                 fetch_next=False, rate=rate)
        assert redis_client.hget(K.groups[5], "g") is None
        again = broker.messages.take("q", "c1", 5, rate).frames
        assert len(again) == 1 and again[0].endswith(b"g"), again
    finally:
        broker.close()


def test_without_group_limits_takes_count_nothing_and_the_repair_counts_for_status(
        redis_url: str, producer: Producer, redis_client: redis.Redis) -> None:
    """No group_concurrency nor group rate: a take of grouped messages counts nothing running (it redeems
    the groups' turns on its hot path); the collector's repair counts them for status, and once they are
    acked its next repair drops the count."""
    broker = Broker(redis_url, NS)
    try:
        broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
        for g in ("a", "b"):
            producer.publish_many("q", [1, 2], group=g)
        none = (0, 1, 1, 0, 0, 1)
        took = broker.messages.take("q", "c1", 3, none).frames
        assert [f[-1:] for f in took] == [b"a", b"b", b"a"]  # a turn each, then one more
        assert not redis_client.exists(K.groups[5])
        lock = (K.gc_lock, "me")
        redis_client.set(K.gc_lock, "me")
        broker.groups.repair("q", lock, 0)
        assert redis_client.hgetall(K.groups[5]) == {b"a": b"2", b"b": b"1"}
        then = broker.messages.ack("q", "c1", took[0], True, none)  # b's turn, redeemed by the ack
        assert then.acked and then.next_frame is not None and then.next_frame.endswith(b"b")
        for f in (*took[1:], then.next_frame):
            assert broker.messages.ack("q", "c1", f, True, none).next_frame is None
        assert redis_client.hgetall(K.groups[5]) == {b"a": b"2", b"b": b"1"}  # (the scripts left it)
        broker.groups.repair("q", lock, 0)
        assert not redis_client.exists(K.groups[0], K.groups[1], K.groups[2], K.groups[5])
    finally:
        broker.close()


@pytest.mark.parametrize("bad", ["", "x" * 257, "\ud800", "a\nb", "\x00", 5, None.__class__, b"g"])
def test_hostile_group_names_are_refused_before_anything_is_sent(bad: Any, producer: Producer,
                                                                 redis_client: redis.Redis) -> None:
    with pytest.raises(MessageError, match="group"):
        producer.publish("q", 1, group=bad)
    assert redis_client.exists(K.pending, K.groups[0]) == 0


def test_odd_but_valid_group_names_round_trip(start: Callable[..., Running], producer: Producer) -> None:
    """A name of 256 bytes, one with '|', ':', tabs excluded but quotes, emoji and '*' in: each message
    arrives with its group."""
    names = ["é" * 128, "a|b:c*", '"quoted"', "\U0001f600", "*", "0|"]
    seen = Seen()
    for name in names:
        producer.publish("q", name, group=name)
    start(seen.begin)
    wait_for(lambda: len(seen.order) == len(names), timeout_s=10)
    assert sorted(seen.order) == sorted((n, n) for n in names)


def test_a_group_rate_limit_spaces_one_groups_starts(start: Callable[..., Running], producer: Producer) -> None:
    """group_rate_limit 10/s: A's 10 starts are at least about 100 ms apart, while B, unlimited by A's
    rate, is not held behind them."""
    times: dict[str, list[float]] = {"A": [], "B": []}

    def handle(msg: Any) -> None:
        times[msg.group].append(time.monotonic())
    producer.publish_many("q", list(range(10)), group="A")
    producer.publish_many("q", list(range(10)), group="B")
    start(handle, group_rate_limit_per_s=10.0, concurrency=4)
    wait_for(lambda: len(times["A"]) == 10 and len(times["B"]) == 10, timeout_s=10)
    for g in "AB":
        gaps = [b - a for a, b in zip(times[g], times[g][1:])]
        assert min(gaps) >= 0.09, (g, gaps)
        assert (times[g][-1] - times[g][0]) < 9 * 0.1 + 0.5, (g, times[g][-1] - times[g][0])


def test_one_group_is_paused_and_resumed_while_the_others_go_on(start: Callable[..., Running],
                                                                  producer: Producer, redis_url: str) -> None:
    """pause --group A: B's messages are all handled while A's wait; resume: A's go too."""
    seen = Seen()
    broker = Broker(redis_url, NS)
    try:
        producer.publish_many("q", [1, 2, 3], group="A")
        producer.publish_many("q", [1, 2, 3], group="B")
        assert broker.groups.pause("q", "A", by="test")
        assert not broker.groups.pause("q", "A", by="test")  # already paused
        start(seen.begin)
        wait_for(lambda: len(seen.order) == 3, timeout_s=10)
        assert {g for g, _ in seen.order} == {"B"}
        assert broker.groups.resume("q", "A")
        assert not broker.groups.resume("q", "A")
        wait_for(lambda: len(seen.order) == 6, timeout_s=10)
        assert [b for g, b in seen.order if g == "A"] == [1, 2, 3]
    finally:
        broker.close()


def test_status_counts_groups_and_names_the_largest_backlogs(producer: Producer, redis_url: str,
                                                             redis_client: redis.Redis) -> None:
    """status: pending counts the groups' ready messages; the groups waiting and the busiest, most first,
    counted exactly after takes (which leave the groups' count scores high, a bound), and the collector's
    repair sets those scores right."""
    from smqsup.collector import stats
    from smqsup.views import status

    producer.publish_many("q", list(range(7)), group="big")
    producer.publish_many("q", list(range(2)), group="small")
    producer.publish_many("q", list(range(4)), group="mid")
    producer.publish("q", 1)
    broker = Broker(redis_url, NS)
    try:
        snap = stats.snapshot(broker, ["q"])
        q = snap["queues"]["q"]
        assert q["groups"] == {"waiting": 3, "busiest": [{"group": "big", "ready": 7, "running": 0},
                                                         {"group": "mid", "ready": 4, "running": 0},
                                                         {"group": "small", "ready": 2, "running": 0}]}
        assert q["sizes"]["pending"] == 14  # (the groups' turns are no messages)
        assert "q: 3 groups waiting; largest backlogs: big 7, mid 4, small 2" in status.render(snap)
        broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
        took = broker.messages.take("q", "c1", 7).frames  # big, small, mid, the ungrouped, big, small, mid
        assert sorted(str(framing.frame_head(f).group) for f in took) == [
            "None", "big", "big", "mid", "mid", "small", "small"]
        assert redis_client.zscore(K.groups[1], "big") == 7.0 and not redis_client.zscore(K.groups[1], "small")
        q = stats.snapshot(broker, ["q"])["queues"]["q"]
        assert q["groups"] == {"waiting": 2, "busiest": [{"group": "big", "ready": 5, "running": 0},
                                                         {"group": "mid", "ready": 2, "running": 0}]}
        redis_client.set(K.gc_lock, "me")
        broker.groups.repair("q", (K.gc_lock, "me"), 0)
        assert redis_client.zrange(K.groups[1], 0, -1, withscores=True) == [(b"mid", 2.0), (b"big", 5.0)]
    finally:
        broker.close()


def _cli_rows(redis_url: str, *args: str) -> list[dict[str, Any]]:
    r = procs.run("messages", "--url", redis_url, "q", "--json", *args)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_operators_list_remove_and_cancel_grouped_waiting_messages(producer: Producer, redis_url: str,
                                                                   redis_client: redis.Redis) -> None:
    """smqsup messages lists grouped waiting messages (no ticket rows), --group lists one group in its
    order; remove and cancel take a grouped message out of its group (counted), and the rest still go."""
    a = producer.publish_many("q", [1, 2, 3], group="A")
    b = producer.publish("q", "b", group="B")
    u = producer.publish("q", "u")
    rows = _cli_rows(redis_url)
    assert sorted(r["id"] for r in rows) == sorted([*a, b, u])
    assert {r["id"]: r["group"] for r in rows}[b] == "B"
    assert [r["id"] for r in _cli_rows(redis_url, "--group", "A")] == a
    r = procs.run("remove", "--url", redis_url, "q", a[1])
    assert r.returncode == 0, r.stderr
    assert producer.cancel("q", a[2]) == "cancelled"
    assert [r["id"] for r in _cli_rows(redis_url, "--group", "A")] == [a[0]]
    assert redis_client.zscore(K.groups[1], "A") == 1.0
    seen: list[Any] = []
    broker = Broker(redis_url, NS)
    try:
        broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
        while took := broker.messages.take("q", "c1", 10).frames:
            seen += took
            for frame in took:
                broker.messages.ack("q", "c1", frame, False)
    finally:
        broker.close()
    assert sorted(framing.peek_id(f) for f in seen) == sorted([a[0], b, u])


def test_removing_a_groups_last_waiting_message_ends_its_count_whatever_its_score(
        producer: Producer, redis_url: str, redis_client: redis.Redis) -> None:
    """A take leaves its group's count score high (a bound); remove and cancel of the group's last
    waiting messages still end its entry, so status names no group with nothing waiting."""
    a = producer.publish_many("q", [1, 2, 3], group="A")
    broker = Broker(redis_url, NS)
    try:
        broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
        assert [framing.peek_id(f) for f in broker.messages.take("q", "c1", 1).frames] == [a[0]]
        assert redis_client.zscore(K.groups[1], "A") == 3.0
        assert procs.run("remove", "--url", redis_url, "q", a[1]).returncode == 0
        assert redis_client.zscore(K.groups[1], "A") == 2.0
        assert producer.cancel("q", a[2]) == "cancelled"
        assert not redis_client.exists(K.groups[0], K.groups[1])
    finally:
        broker.close()


@pytest.mark.sync_client_only("the CLI's pause and publish; the producer only publishes")
def test_cli_pause_resume_and_publish_take_a_group(producer: Producer, redis_url: str,
                                                    redis_client: redis.Redis) -> None:
    """smqsup publish --group, pause --group and resume --group, and their hostile names (one line, exit 2)."""
    r = procs.run("publish", "--url", redis_url, "q", '{"n": 1}', "--group", "tenant-1")
    assert r.returncode == 0, r.stderr
    assert _cli_rows(redis_url, "--group", "tenant-1")[0]["group"] == "tenant-1"
    r = procs.run("pause", "--url", redis_url, "q", "--group", "tenant-1")
    assert r.returncode == 0 and "paused group tenant-1 of q" in r.stdout, r.stderr
    assert redis_client.hexists(K.groups[2], "p:tenant-1")
    r = procs.run("resume", "--url", redis_url, "q", "--group", "tenant-1")
    assert r.returncode == 0 and "resumed group tenant-1 of q" in r.stdout, r.stderr
    for bad in ("", "x" * 300, "a\tb"):
        r = procs.run("publish", "--url", redis_url, "q", "1", "--group", bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--group" in r.stderr, r.stderr


def test_the_lag_counts_grouped_messages_and_dates_the_next_groups_turn(producer: Producer, redis_url: str,
                                                                        redis_client: redis.Redis) -> None:
    """Grouped messages are ready messages for the lag (and autoscaling): counted, and the next group's
    first message dated when a group's turn is next in line."""
    producer.publish_many("q", list(range(4)), group="A")
    broker = Broker(redis_url, NS)
    try:
        lag = wait_for(lambda: (got := broker.lags.read({"q": 1})["q"]).lag_s and got, timeout_s=5)
    finally:
        broker.close()
    assert lag.ready == 4 and lag.lag_s is not None and 0 < lag.lag_s < 60
