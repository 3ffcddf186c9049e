"""Dependencies between messages (depends_on, chain): a child held until its
parents are done, across queues and partitions, on one Redis and on the
Redis Cluster; consumers and collectors in threads (the real processes and
signals are in test_dependencies_processes.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import MessageFailed
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from tests.support.helpers import holds, redis_ms, wait_for
from tests.support.inproc import NS, Running

pytestmark = [pytest.mark.topologies, pytest.mark.both_clients]


class Seen:
    """What handlers saw: (queue, body, parents, failed parents, when), in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[tuple[str, Any, dict[Any, Any], dict[Any, Any], float]] = []

    def handler(self, result: Callable[[Any], Any] = lambda m: m.body) -> Callable[[Any], Any]:
        def handle(m: Any) -> Any:
            with self.lock:
                self.items.append((m.queue, m.body, dict(m.parents), dict(m.failed_parents), time.monotonic()))
            return result(m)
        return handle

    def bodies(self, queue: str) -> list[Any]:
        with self.lock:
            return [b for q, b, *_ in self.items if q == queue]

    def of(self, body: Any) -> tuple[str, Any, dict[Any, Any], dict[Any, Any], float]:
        with self.lock:
            return next(item for item in self.items if item[1] == body)


def test_a_child_waits_for_its_parent_and_reads_its_result(start: Callable[..., Running], producer: Producer) -> None:
    """The child is "blocked" until the parent is done, then runs with the parent's result in message.parents."""
    seen = Seen()
    parent = producer.publish("a", {"n": 1}, result_ttl=60)
    child = producer.publish("b", "child", depends_on=[("a", parent)], result_ttl=60)
    assert producer.state("b", child) == "blocked"
    start(seen.handler(), name="b")
    holds(lambda: seen.bodies("b") == [], 0.3)  # b's consumer runs: nothing reaches it while the parent waits
    start(seen.handler(lambda m: {"got": m.body["n"]}), name="a")
    assert producer.result("b", child, timeout=10) == "child"
    assert seen.of("child")[2] == {("a", parent): {"got": 1}}
    assert seen.of("child")[4] > seen.of({"n": 1})[4]


def test_a_fan_in_of_many_parents_on_three_queues_runs_once_after_the_last(
        redis_url: str, start: Callable[..., Running], producer: Producer) -> None:
    """60 parents on 3 queues, one child: it runs once, after the last parent, with all 60 results."""
    seen = Seen()
    parents = [(q, producer.publish(q, {"q": q, "i": i}, result_ttl=60)) for i in range(20) for q in "xyz"]
    child = producer.publish("c", "fan-in", depends_on=parents)
    start(seen.handler(), name="c")
    for q in "xyz":
        start(seen.handler(lambda m: m.body["i"] * 10), name=q)
    wait_for(lambda: seen.bodies("c"), timeout_s=15)
    holds(lambda: seen.bodies("c") == ["fan-in"], 0.3)  # and it runs no second time
    _, _, got, failed, at = seen.of("fan-in")
    assert failed == {}
    assert got == {(q, mid): int(i) * 10 for (q, mid), i in zip(parents, [i for i in range(20) for _ in "xyz"])}
    assert at > max(item[4] for item in seen.items if item[0] in "xyz")
    assert Broker(redis_url, NS).workflows.waits("c", child) == []


def test_on_the_cluster_parents_and_children_live_on_different_masters(
        topology: str, redis_client: redis.Redis, start: Callable[..., Running], producer: Producer) -> None:
    """The queues of the fan-in test sit on more than one master, and a child on one releases from parents on
    another (on one Redis: the same flow)."""
    if topology == "cluster":
        nodes = {redis_client.get_node_from_key(QueueKeys(NS, q).deps).name for q in "xyzc"}  # type: ignore[attr-defined]
        assert len(nodes) >= 2
        parent_node = redis_client.get_node_from_key(QueueKeys(NS, "x").deps).name  # type: ignore[attr-defined]
        child_q = next(q for q in "yzc" if redis_client.get_node_from_key(  # type: ignore[attr-defined]
            QueueKeys(NS, q).deps).name != parent_node)
    else:
        child_q = "c"
    seen = Seen()
    parent = producer.publish("x", {"i": 3}, result_ttl=60)
    child = producer.publish(child_q, "c", depends_on=[("x", parent)], result_ttl=60)
    start(seen.handler(lambda m: m.body["i"]), name="x")
    start(seen.handler(), name=child_q)
    assert producer.result(child_q, child, timeout=10) == "c"
    assert seen.of("c")[2] == {("x", parent): 3}


def test_a_parent_done_before_the_publish_counts_at_once(start: Callable[..., Running], producer: Producer) -> None:
    """A child of a parent that already ended is released by its publish."""
    seen = Seen()
    start(seen.handler(lambda m: "p-result"), name="a")
    parent = producer.publish("a", "p", result_ttl=60)
    assert producer.result("a", parent, timeout=10) == "p-result"
    start(seen.handler(), name="b")
    child = producer.publish("b", "c", depends_on=[("a", parent)], result_ttl=60)
    assert producer.result("b", child, timeout=10) == "c"
    assert seen.of("c")[2] == {("a", parent): "p-result"}


def test_a_dead_parent_dead_letters_its_children_with_the_reason(start: Callable[..., Running],
                                                                 producer: Producer, redis_url: str) -> None:
    """A parent that fails for good dead-letters its waiting child: "dependency failed: a/ID (reason)"."""
    def fail(m: Any) -> Any:
        raise ValueError("bad input")
    start(fail, name="a", retry_threshold=1)
    parent = producer.publish("a", "p", result_ttl=60)
    child = producer.publish("b", "c", depends_on=[("a", parent)], result_ttl=60)
    with pytest.raises(MessageFailed) as info:
        producer.result("b", child, timeout=10)
    assert f"dependency failed: a/{parent} (" in str(info.value)
    assert producer.state("b", child) == "dead"
    b = Broker(redis_url, NS)
    meta, _ = _dead_letters(b, "b")[0]
    assert meta["reason"].startswith(f"dependency failed: a/{parent} (")
    assert meta["parent"] == f"a/{parent}"


def test_on_parent_failure_run_runs_the_child_with_the_failure_said(start: Callable[..., Running],
                                                                   producer: Producer) -> None:
    """With on_parent_failure="run", a child runs after a cancelled parent and a done one, and says which failed."""
    seen = Seen()
    ok = producer.publish("a", "ok", result_ttl=60)
    doomed = producer.publish("a", "doomed", result_ttl=60, delay=30)
    child = producer.publish("b", "c", depends_on=[("a", ok), ("a", doomed)], on_parent_failure="run",
                             result_ttl=60)
    assert producer.cancel("a", doomed) == "cancelled"
    start(seen.handler(lambda m: m.body.upper()), name="a")
    start(seen.handler(), name="b")
    assert producer.result("b", child, timeout=10) == "c"
    assert seen.of("c")[2] == {("a", ok): "OK"}
    assert list(seen.of("c")[3]) == [("a", doomed)]
    assert "cancelled" in seen.of("c")[3][("a", doomed)]


def test_a_chain_of_five_steps_passes_results_along(start: Callable[..., Running], producer: Producer) -> None:
    """chain() publishes 5 steps on 2 queues; each runs after the one before, reading its result."""
    seen = Seen()

    def step(m: Any) -> Any:
        (before,) = m.parents.values() if m.parents else (0,)
        return before + m.body
    ids = producer.chain([("a", 1), ("b", 10), ("a", 100), ("b", 1000, {"priority": 5}), ("a", 10000, {"result_ttl": 60})])
    start(seen.handler(step), name="a")
    start(seen.handler(step), name="b")
    assert producer.result("a", ids[-1], timeout=15) == 11111
    assert [b for _, b, *_ in seen.items] == [1, 10, 100, 1000, 10000]


def test_a_delay_and_a_ttl_count_from_the_release(start: Callable[..., Running], producer: Producer) -> None:
    """A child with delay=0.5 starts at least 0.5 s after its parent ended; its ttl=1 counts from then too."""
    seen = Seen()
    parent = producer.publish("a", "p", result_ttl=60, delay=1.5)
    child = producer.publish("b", "c", depends_on=[("a", parent)], delay=0.5, ttl=1, result_ttl=60)
    start(seen.handler(), name="a")
    start(seen.handler(), name="b")
    assert producer.result("b", child, timeout=10) == "c"
    assert seen.of("c")[4] - seen.of("p")[4] >= 0.5


def _held_never_registered(start: Callable[..., Running], producer: Producer, monkeypatch: pytest.MonkeyPatch,
                           timeout_s: float) -> None:
    """Child c of queue b held on parent p of queue a by a producer that died before telling the parents
    (register raises SystemExit); with consumers of a and b and the hold repair every 0.5 s, c runs."""
    from smqsup import defaults
    from smqsup.store.ops import workflows
    seen = Seen()
    parent = producer.publish("a", "p", result_ttl=60)

    def die(*_: Any, **__: Any) -> str:
        raise SystemExit("the producer died here")
    monkeypatch.setattr(workflows.Workflows, "register", die)
    with pytest.raises(SystemExit):
        producer.publish("b", "c", depends_on=[("a", parent)], result_ttl=60)
    monkeypatch.undo()
    monkeypatch.setattr(defaults, "HOLD_REPAIR_S", 0.5)
    start(seen.handler(), name="a")
    start(seen.handler(), name="b")
    wait_for(lambda: seen.bodies("b") == ["c"], timeout_s=timeout_s)


@pytest.mark.sync_client_only("a SystemExit raised inside a publish stops the event loop that runs it")
def test_a_child_held_but_never_registered_is_registered_by_the_collector(
        start: Callable[..., Running], producer: Producer, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer dies between the hold and telling the parents: the collector finishes it (HOLD_REPAIR_S)."""
    _held_never_registered(start, producer, monkeypatch, timeout_s=10)


@pytest.mark.sync_client_only("a SystemExit raised inside a publish stops the event loop that runs it")
def test_holds_the_collector_cannot_register_hold_no_other_hold(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """150 old holds sorting first whose parent partition's tracking hash is a string (each registration refused):
    the collector's repair still reaches a real hold behind them and releases its child."""
    redis_client.set(QueueKeys(NS, "p").tracked, "garbage")
    k = QueueKeys(NS, "b")
    redis_client.zadd(k.deps, {f"h\t0000-{i:04d}\t1": 0 for i in range(150)})
    redis_client.zadd(k.deps, {f"w\t0000-{i:04d}\tp\tx": 0 for i in range(150)})
    _held_never_registered(start, producer, monkeypatch, timeout_s=15)


def test_a_consumer_that_dies_after_the_ack_leaves_the_release_to_the_collector(
        start: Callable[..., Running], producer: Producer, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumer acks the parent but never tells its child (as if it died there): the collector's drain does."""
    from smqsup.worker.settling import Settler
    told: list[int] = []
    monkeypatch.setattr(Settler, "_tell", lambda self: told.append(1))
    seen = Seen()
    parent = producer.publish("a", "p", result_ttl=60)
    child = producer.publish("b", "c", depends_on=[("a", parent)], result_ttl=60)
    assert Broker(redis_url, NS).workflows.waits("b", child) == [("a", parent)]
    start(seen.handler(), name="a")
    start(seen.handler(), name="b")
    assert producer.result("b", child, timeout=10) == "c"
    assert told == [1]


def _dead_letters(b: Broker, queue: str) -> list[tuple[dict[str, Any], bytes]]:
    raw = b.client.lrange(QueueKeys(NS, queue).dead, 0, -1)
    return [(json.loads(meta), frame) for meta, frame in (entry.split(b"\n", 1) for entry in raw)]


# --- hostile input --------------------------------------------------------------------


def test_an_unknown_parent_is_refused_and_nothing_is_published(producer: Producer, redis_client: redis.Redis) -> None:
    """A parent never published, one untracked, one on another queue: MessageError naming it; nothing held."""
    untracked = producer.publish("a", "plain")
    for parents in ([("a", "no-such-id")], [("a", untracked)], [("zz", untracked)]):
        with pytest.raises(MessageError, match=r"depends_on: message .* is not known.*nothing was published"):
            producer.publish("b", "c", depends_on=parents)
    assert redis_client.exists(QueueKeys(NS, "b").blocked) == 0


@pytest.mark.parametrize("bad, match", [
    ("a", "expected a list of"), ({"a": "b"}, "expected a list of"), ([], "empty"), ([("a",)], "pair"),
    ([("a", "x", "y")], "pair"), (["ab"], "pair"), ([(1, "x")], "queue"), ([("a", "")], "message_id"),
    ([("a", "x" * 129)], "message_id"), ([("a", "bad id")], "message_id"), ([("a", "é")], "message_id"),
    ([("a\n", "x")], "queue"), ([("a", None)], "message_id"), (5, "expected a list of"),
])
def test_hostile_depends_on_is_one_line_and_sends_nothing(producer: Producer, redis_client: redis.Redis,
                                                          bad: Any, match: str) -> None:
    """Wrong types, empty, odd ids, odd queue names: MessageError of one line, nothing written."""
    with pytest.raises(MessageError, match=match) as info:
        producer.publish("b", "c", depends_on=bad)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400
    assert redis_client.exists(QueueKeys(NS, "b").blocked, QueueKeys(NS, "b").deps) == 0


def test_more_parents_than_the_limit_are_refused(producer: Producer) -> None:
    """100,000 parents: refused at once, naming the limit and the batch."""
    with pytest.raises(MessageError, match="100000 parents, more than 10000.*batch"):
        producer.publish("b", "c", depends_on=[("a", f"id{i}") for i in range(100_000)])


def test_no_message_can_wait_for_itself_or_its_own_child(producer: Producer) -> None:
    """A message naming itself is refused; reusing a child's id for a new parent of it (a cycle) is refused."""
    with pytest.raises(MessageError, match="cannot depend on itself"):
        producer.publish("a", "x", message_id="me", depends_on=[("a", "me")], result_ttl=60)
    parent = producer.publish("a", "p", result_ttl=60)
    child = producer.publish("a", "c", depends_on=[("a", parent)], result_ttl=60)
    with pytest.raises(MessageError, match="in use"):
        producer.publish("a", "again", message_id=child, depends_on=[("a", parent)], result_ttl=60)
    with pytest.raises(MessageError, match="in use"):
        producer.publish("a", "cycle", message_id=parent, depends_on=[("a", child)], result_ttl=60)


def test_at_and_a_bad_failure_rule_are_refused(producer: Producer) -> None:
    """at= with depends_on, and on_parent_failure other than fail/run: MessageError."""
    parent = producer.publish("a", "p", result_ttl=60)
    with pytest.raises(MessageError, match="at: not with depends_on"):
        producer.publish("b", "c", depends_on=[("a", parent)], at=time.time() + 60)
    for rule in ("ignore", None, 1, "RUN"):
        with pytest.raises(MessageError, match="on_parent_failure"):
            producer.publish("b", "c", depends_on=[("a", parent)], on_parent_failure=rule)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad, match", [
    ([], "non-empty"), ("a", "non-empty"), ([("a",)], r"chain\[0\]"), ([("a", 1, {"depends_on": []})], "unknown option"),
    ([("a", 1), ("b", 2, [1])], "mapping"), ([("a", 1, {"result_ttl": 0}), ("b", 2)], "result_ttl 0"),
    ([("a", 1), ("b", object())], "JSON"), ([("a b", 1)], "queue"),
])
def test_a_bad_chain_is_refused_before_anything_is_sent(producer: Producer, redis_client: redis.Redis,
                                                        bad: Any, match: str) -> None:
    """Each step is checked before the first is published."""
    with pytest.raises(MessageError, match=match):
        producer.chain(bad)
    assert redis_client.llen(QueueKeys(NS, "a").pending) == 0


def test_garbage_in_the_deps_key_costs_the_dependencies_not_the_messages(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Garbage outbox entries and marks are dropped; a deps key of the wrong type leaves acks working."""
    seen = Seen()
    k = QueueKeys(NS, "a")
    redis_client.zadd(k.deps, {b"o\tjunk": 0, b"o\tb\tid\tp\tmaybe\tx": 0, b"h\tid\tnot-ms": 0,
                               b"o\t\xff\xfe\tid\tp\tdone\tnull": 0, "h\tid2\t\u00b2".encode(): 0})
    start(seen.handler(), name="a")
    wait_for(lambda: redis_client.zcard(k.deps) == 0 or
             all(not m.startswith((b"o", b"h")) for m in redis_client.zrange(k.deps, 0, -1)), timeout_s=10)
    redis_client.delete(k.deps)
    redis_client.set(k.deps, "garbage")
    mid = producer.publish("a", "still works", result_ttl=60)
    assert producer.result("a", mid, timeout=10) == "still works"


def test_garbage_in_the_held_keys_costs_that_child_only(start: Callable[..., Running], producer: Producer,
                                                        redis_client: redis.Redis) -> None:
    """A held child whose kept bytes are garbage is dropped when its parent ends; a child queue whose blocked
    hash is a string keeps its outbox entry, set aside (said once), while another child of the same parent is
    released."""
    seen = Seen()
    parent = producer.publish("a", "p", result_ttl=60, delay=0.3)
    junk = producer.publish("b", "junk", depends_on=[("a", parent)])
    stuck = producer.publish("x", "stuck", depends_on=[("a", parent)])
    fine = producer.publish("c", "fine", depends_on=[("a", parent)], result_ttl=60)
    redis_client.hset(QueueKeys(NS, "b").blocked, junk, b"\xff garbage")
    redis_client.delete(QueueKeys(NS, "x").blocked)
    redis_client.set(QueueKeys(NS, "x").blocked, "garbage")
    for q in "abcx":
        start(seen.handler(), name=q)
    assert producer.result("c", fine, timeout=10) == "fine"
    wait_for(lambda: redis_client.hexists(QueueKeys(NS, "b").blocked, junk) == 0)
    assert seen.bodies("b") == [] and seen.bodies("x") == []
    outbox = [m for m in redis_client.zrange(QueueKeys(NS, "a").deps, 0, -1) if m.startswith(b"o\t")]
    parked = wait_for(lambda: redis_client.zrange(QueueKeys(NS, "a").outbox_parked, 0, -1))
    assert outbox == [] and [m.split(b"\t")[1:3] for m in parked] == [[b"x", stuck.encode()]]


def test_parents_in_partitions_and_a_parent_that_expires(start: Callable[..., Running], producer: Producer,
                                                         redis_client: redis.Redis, redis_url: str) -> None:
    """Parents on both partitions of a queue release their child; a parent whose ttl passes before a consumer
    takes it dead-letters its child "dependency failed: ... (expired)"."""
    seen = Seen()
    redis_client.set(QueueKeys(NS, "pp").partitions, "2")
    parents = [("pp", producer.publish("pp", i, result_ttl=60, partition_key=f"k{i}")) for i in range(6)]
    assert {Broker(redis_url, NS).tracking.find(["pp", "pp~1"], mid)[0] for _, mid in parents} == {"pp", "pp~1"}
    child = producer.publish("c", "joined", depends_on=parents, result_ttl=60)
    published_ms = redis_ms(redis_client)
    doomed_parent = producer.publish("e", "late", result_ttl=60, ttl=0.2)
    doomed = producer.publish("c", "never", depends_on=[("e", doomed_parent)], result_ttl=60)
    start(seen.handler(), name="pp", partitions=2)
    start(seen.handler(), name="c")
    assert producer.result("c", child, timeout=10) == "joined"
    assert set(seen.of("joined")[2]) == set(parents)
    wait_for(lambda: Broker(redis_url, NS).statistics.total_sizes("e")["pending"] == 1)
    wait_for(lambda: redis_ms(redis_client) > published_ms + 250)  # the parent's ttl passed, by the Redis clock
    start(seen.handler(), name="e")
    with pytest.raises(MessageFailed) as failed:
        producer.result("c", doomed, timeout=10)
    assert failed.value.reason == f"dependency failed: e/{doomed_parent} (expired)"


def test_a_held_child_sees_a_dedup_key_held_until_done(producer: Producer) -> None:
    """A key another message holds until it is done deduplicates a publish with depends_on too."""
    parent = producer.publish("a", "p", result_ttl=60)
    holder = producer.publish("b", 1, dedup_key="K", dedup_until="done")
    assert producer.publish("b", 2, dedup_key="K", depends_on=[("a", parent)]) == holder


@pytest.mark.parametrize("junk", [b'{"state":"done"', b'{"state":"dead","meta":', b'{"state": 7}', b"\xff"],
                         ids=["done cut short", "dead cut short", "no state", "not utf-8"])
def test_a_parent_record_holding_garbage_counts_as_running(producer: Producer, redis_client: redis.Redis,
                                                           junk: bytes) -> None:
    """A parent whose record is not one smqsup wrote (even one starting like a done one): its child is held,
    neither released with a made-up result nor failed."""
    redis_client.hset(QueueKeys(NS, "a").tracked, "odd", junk)
    child = producer.publish("b", "c", depends_on=[("a", "odd")], result_ttl=60)
    assert producer.state("b", child) == "blocked"
