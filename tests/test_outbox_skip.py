"""The outboxes never let one failing entry hold the others: an entry whose
target Redis refuses (a key of the wrong type) is backed off, then parked
with its reason, shown by ``smqsup status``, and completes once the key is
repaired; the other entries go on at once. A real redis-server and the
Redis Cluster, consumers and collectors in threads, status in a
subprocess."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import defaults
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.inproc import NS, Running

pytestmark = pytest.mark.topologies

#: Forged outbox entries of one broken target: more than one drain reads (500).
_STUCK = 510


class Seen:
    """The bodies each queue's handler saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, list[Any]] = {}

    def __call__(self, m: Any) -> None:
        with self.lock:
            self.seen.setdefault(m.queue, []).append(m.body)

    def of(self, queue: str) -> list[Any]:
        with self.lock:
            return list(self.seen.get(queue, []))


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoffs of a test's length: parked after 2 failures, retried every 0.3 s at most."""
    monkeypatch.setattr(defaults, "OUTBOX_RETRY_BASE_S", 0.1)
    monkeypatch.setattr(defaults, "OUTBOX_RETRY_MAX_S", 0.3)
    monkeypatch.setattr(defaults, "OUTBOX_PARK_AFTER", 2)


def _parked(redis_url: str) -> dict[str, Any]:
    """status --json's parked outbox entries, by queue."""
    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    return {name: q["outbox_parked"] for name, q in snap["queues"].items() if q.get("outbox_parked")}


def test_children_of_a_queue_with_a_broken_blocked_key_hold_no_other_child(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, redis_url: str,
        quick_retries: None) -> None:
    """510 children of queue b (its blocked hash a string) sort first in parent a's outbox: the child on c is
    still released at once; b's entries are parked, shown in status --json naming the key, and go once the
    key is repaired."""
    seen = Seen()
    parent = producer.publish("a", "p", result_ttl=60)
    child = producer.publish("c", "child", depends_on=[("a", parent)], result_ttl=60)
    blocked_b = QueueKeys(NS, "b").blocked
    redis_client.set(blocked_b, "garbage")
    redis_client.zadd(QueueKeys(NS, "a").deps, {f"o\tb\tb-{i:04d}\t{parent}\tdone\tnull": 0 for i in range(_STUCK)})
    start(seen, name="a")
    start(seen, name="c")
    assert producer.result("c", child, timeout=15) is None
    parked = wait_for(lambda: _parked(redis_url).get("a"), timeout_s=15)
    [entry] = parked
    assert (entry["kind"], entry["target_queue"], entry["entries"]) == ("child", "b", _STUCK)
    assert entry["key"] == blocked_b and "WRONGTYPE" in entry["reason"] and entry["parked"] is True
    table = procs.run("status", "--url", redis_url).stdout
    assert f"a: outbox: {_STUCK} child entr(ies) for b parked after" in table and blocked_b in table
    redis_client.delete(blocked_b)
    wait_for(lambda: not _parked(redis_url), timeout_s=15)
    assert not [m for m in redis_client.zrange(QueueKeys(NS, "a").deps, 0, -1) if m.startswith(b"o\t")]


def test_a_parked_child_is_released_exactly_once_when_its_key_is_repaired(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, redis_url: str,
        quick_retries: None) -> None:
    """A held child whose queue's pending list is a string when its parent ends: parked with the key named;
    the key deleted, the child is released and handled exactly once."""
    seen = Seen()
    parent = producer.publish("a", "p", result_ttl=60)
    child = producer.publish("x", "child", depends_on=[("a", parent)], result_ttl=60)
    pending_x = QueueKeys(NS, "x").pending
    redis_client.set(pending_x, "garbage")
    start(seen, name="a")
    [entry] = wait_for(lambda: _parked(redis_url).get("a"), timeout_s=15)
    assert (entry["target_queue"], entry["target_id"], entry["key"]) == ("x", child, pending_x)
    redis_client.delete(pending_x)
    start(seen, name="x")
    assert producer.result("x", child, timeout=15) is None
    wait_for(lambda: not _parked(redis_url), timeout_s=15)
    assert seen.of("x") == ["child"]


def test_a_healthy_batch_fires_while_a_broken_batch_end_sits_first(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, redis_url: str,
        quick_retries: None) -> None:
    """510 ends of a batch whose members set is a string sort first in the outbox of queue w: a 1-member batch
    on w still fires its callback once; the broken ends are parked with the key named."""
    seen = Seen()
    home = QueueKeys(NS, "b")
    redis_client.hset(home.batch("X"), mapping={"closed": 0, "fired": 0, "done": 0, "failed": 0, "created_ms": 1})
    redis_client.set(home.batch_members("X"), "garbage")
    redis_client.zadd(QueueKeys(NS, "w").deps, {f"B\tb\tX\tm-{i:04d}\tdone\t": 0 for i in range(_STUCK)})
    start(seen, name="w")
    start(seen, name="z")
    with producer.batch(on_complete=("z", "fired")) as batch:
        batch.publish("w", "member")
    wait_for(lambda: seen.of("z"), timeout_s=15)
    [entry] = wait_for(lambda: _parked(redis_url).get("w"), timeout_s=15)
    assert (entry["kind"], entry["target_queue"], entry["target_id"]) == ("batch end", "b", "X")
    assert entry["key"] == home.batch_members("X") and entry["entries"] == _STUCK
    assert [s["body"] for s in seen.of("z")] == ["fired"]


@pytest.mark.parametrize("which", ["members", "ended", "failures", "index", "pending"])
def test_batch_settle_checks_every_key_before_it_writes_and_names_the_broken_one(
        redis_client: redis.Redis, redis_url: str, which: str) -> None:
    """A batch key of the wrong type: batch_settle refuses before its first write, naming that key."""
    home = QueueKeys(NS, "b")
    keys = {"members": home.batch_members("X"), "ended": home.batch_ended("X"),
            "failures": home.batch_failures("X"), "index": home.batches, "pending": home.pending}
    redis_client.hset(home.batch("X"), mapping={"closed": 1, "fired": 0, "done": 0, "failed": 0, "created_ms": 1,
                                                "complete": "x"})
    redis_client.set(keys[which], "garbage")
    before = {k: redis_client.dump(k) for k in (home.batch("X"), *keys.values())}
    b = Broker(redis_url, NS)
    from smqsup.store import scripts
    call = scripts.batch_settle(home, "X", [("m1", "dead", '{"id":"m1"}')], close=True, keep_s=60)
    with pytest.raises(redis.ResponseError, match=re.escape(f"WRONGTYPE {keys[which]} holds a string")):
        call.run(b.client)
    assert {k: redis_client.dump(k) for k in before} == before


def test_garbage_in_the_parked_set_and_records_holds_no_parked_entry(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, redis_url: str,
        quick_retries: None) -> None:
    """600 members of no kind and 100 malformed entries sort first in the parked set, and the records hash
    holds junk:
    they are dropped, status still reads, and a parked child is released once its key is repaired."""
    seen = Seen()
    a = QueueKeys(NS, "a")
    parent = producer.publish("a", "p", result_ttl=60)
    child = producer.publish("x", "child", depends_on=[("a", parent)], result_ttl=60)
    pending_x = QueueKeys(NS, "x").pending
    redis_client.set(pending_x, "garbage")
    redis_client.zadd(a.outbox_parked, {**{f"junk-{i:04d}": 0 for i in range(600)},
                                        **{f"o\tjunk-{i:04d}": 0 for i in range(100)}})
    redis_client.hset(a.outbox_failures, mapping={"o\tq": b"\xff not json", "B": "[1, 2]", "S\tz": '{"entries": "x"}'})
    start(seen, name="a")
    wait_for(lambda: any(p["target_id"] == child for p in _parked(redis_url).get("a", [])), timeout_s=15)
    redis_client.delete(pending_x)
    start(seen, name="x")
    assert producer.result("x", child, timeout=15) is None
    wait_for(lambda: redis_client.zcard(a.outbox_parked) == 0, timeout_s=15)
    assert seen.of("x") == ["child"]
