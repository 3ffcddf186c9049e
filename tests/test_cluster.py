"""Redis Cluster and replication as users meet them: redis+cluster:// urls
(good and hostile), a live resharding under a running consumer and
producer, and ``wait_replicas`` on a replicated and a lone server and on a
cluster with one replica stopped."""

from __future__ import annotations

import collections
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

from smqsup import logs
from smqsup.client.producer import Producer
from smqsup.config import addresses
from smqsup.config.model import QueueConfig
from smqsup.errors import BrokerConnectionError, ConfigError, PublishNotReplicated, PublishNotSent
from smqsup.framing import peek_id
from smqsup.keys import QueueKeys, partition_names
from smqsup.launch.discovery import free_port
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from smqsup.worker.consumer import Consumer
from tests.support import procs
from tests.support.helpers import Monitored, client_for, wait_for
from tests.support.inproc import NS, Running
from tests.support.topology import ClusterTopology, SentinelTopology

K = QueueKeys(NS, "q")


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the once-per-process warnings given by earlier tests in this process (the
    tests here count the one a replica's shortfall gives)."""
    monkeypatch.setattr(logs, "_warned", set())


@pytest.mark.parametrize(("url", "problem"), [
    ("redis+cluster:///", "needs its seed nodes"),
    ("redis+cluster://h:0/", "bad port"),
    ("redis+cluster://h:99999/", "bad port"),
    ("redis+cluster://h:x/", "bad port"),
    ("redis+cluster://h:1,,h:2/", "no host"),
    ("redis+cluster://:secret-pw@h:1/3", "only database 0"),
    ("redis+cluster://" + "h:1," * 5000 + "h:2/", None),
    ("redis+clusterx://h:1/", "unsupported url scheme"),
])
def test_cluster_urls_are_checked_with_one_line_naming_the_key(url: str, problem: str | None) -> None:
    """A bad seed list, port or database is a ConfigError naming redis.url; the password never shows."""
    if problem is None:
        assert addresses.redis_url(url, "redis.url", "q.yaml") == url  # many seeds: fine
        return
    with pytest.raises(ConfigError, match=problem) as caught:
        addresses.redis_url(url, "redis.url", "q.yaml")
    text = str(caught.value)
    assert "redis.url" in text and "\n" not in text and "secret-pw" not in text


def test_no_seed_answering_is_a_connection_error_without_the_password() -> None:
    """Seeds that do not answer: BrokerConnectionError (Redis away, not a bad config), password masked;
    the CLI says it in one line."""
    url = f"redis+cluster://:secret-pw@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/"
    with pytest.raises(BrokerConnectionError) as caught:
        Broker(url)
    assert "secret-pw" not in str(caught.value)
    result = procs.run("status", "--url", url)
    assert result.returncode != 0 and "secret-pw" not in result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def _move_slot(cluster: ClusterTopology, key: str, to: RedisServer) -> int:
    """Reshard as redis-cli does: the slot of ``key`` from its master to ``to``, key by key (MIGRATE),
    holding the slot half-moved until a client of it has been refused there (ASK or TRYAGAIN: the
    source's INFO errorstats); how many such refusals the source counted."""
    src = cluster.master_for_key(key)
    a, b = cluster.client(src), cluster.client(to)
    before = _refusals(a)
    slot = int(a.execute_command("CLUSTER", "KEYSLOT", key))
    src_id, dst_id = a.execute_command("CLUSTER", "MYID"), b.execute_command("CLUSTER", "MYID")
    b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    if keys := a.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1):
        a.execute_command("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
    wait_for(lambda: _refusals(a) > before, timeout_s=10, message="no client met the slot half-moved")
    while keys := a.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10):
        a.execute_command("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
    for m in cluster.masters():
        cluster.client(m).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    return _refusals(a) - before


def _refusals(client: Any) -> int:
    """ASK and TRYAGAIN replies a server has given (INFO errorstats)."""
    stats = client.info("errorstats")
    return sum(int(stats.get(f"errorstat_{kind}", {}).get("count", 0)) for kind in ("ASK", "TRYAGAIN"))


def _two_consumers(url: str) -> tuple[collections.Counter[int], list[Running]]:
    """A sequential and a concurrent (4) consumer of "q", counting how often each body was handled."""
    seen: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def handle(m: Any) -> None:
        with lock:
            seen[m.body] += 1
    return seen, [Running(url, QueueConfig("q", "x:y"), handle),
                  Running(url, QueueConfig("q", "x:y", concurrency=4), handle)]


@pytest.mark.timeout(90)
def test_a_live_resharding_moves_a_busy_queue_and_loses_nothing(fresh_cluster: ClusterTopology) -> None:
    """The queue's slot migrates to another master (ASK, TRYAGAIN, then MOVED) while a sequential and a
    concurrent consumer handle and a producer publishes: every message is handled, none twice."""
    url = fresh_cluster.url
    seen, runs = _two_consumers(url)
    published: list[int] = []
    moved = threading.Event()

    def produce() -> None:
        with Producer(url) as p:
            for i in range(0, 3000, 10):
                p.publish_many("q", list(range(i, i + 10)))
                published.extend(range(i, i + 10))
                if i == 1500:
                    moved.wait(30)
    try:
        producer = threading.Thread(target=produce, daemon=True)  # not left to block the exit if this fails
        producer.start()
        wait_for(lambda: len(seen) >= 300, timeout_s=20)
        other = next(m for m in fresh_cluster.masters() if m is not fresh_cluster.master_for_key(K.pending))
        refused = _move_slot(fresh_cluster, K.pending, other)
        moved.set()
        producer.join(60)
        assert fresh_cluster.master_for_key(K.pending).port == other.port
        wait_for(lambda: len(seen) == 3000, timeout_s=30, message=f"{len(seen)} of 3000 handled")
    finally:
        moved.set()
        for r in runs:
            r.stop()
    assert len(published) == 3000 and max(seen.values()) == 1 and refused > 0


def test_a_master_restarted_in_place_is_followed_by_consumers_and_producers(fresh_cluster: ClusterTopology) -> None:
    """The queue's master stops while a sequential and a concurrent consumer wait on it in BLMOVE and
    starts again on its port (no failover): both consumers and a producer go on by themselves, every
    message handled once."""
    url = fresh_cluster.url
    seen, runs = _two_consumers(url)
    try:
        with Producer(url) as p:
            p.publish_many("q", list(range(500)))
            wait_for(lambda: len(seen) == 500, timeout_s=20)
            master = fresh_cluster.master_for_key(K.pending)
            wait_for(lambda: fresh_cluster.client(master).info("clients")["blocked_clients"] >= 2,
                     message="the consumers never blocked in BLMOVE")
            fresh_cluster.restart_in_place(master)
            # The producer's connection to the old process is gone: its next batch goes out
            # on a new one (a batch refused as not sent is the caller's to send again).
            wait_for(lambda: _goes_through(lambda: p.publish_many("q", list(range(500, 1000))), PublishNotSent),
                     timeout_s=20)
        wait_for(lambda: len(seen) == 1000, timeout_s=30, message=f"{len(seen)} of 1000 handled")
    finally:
        for r in runs:
            r.stop()
    assert max(seen.values()) == 1 and fresh_cluster.master_for_key(K.pending).port == master.port


def _goes_through(send: Callable[[], object], refusal: type[Exception]) -> bool:
    """True if ``send()`` returned, False if it raised ``refusal`` (to be tried again)."""
    try:
        send()
    except refusal:
        return False
    return True


def test_wait_replicas_confirms_a_publish_on_a_replicated_master(sentinel_group: SentinelTopology) -> None:
    """With a replica: wait_replicas 1 publishes as usual; 2 (one replica short) raises PublishNotReplicated
    within wait_timeout, the messages queued on the master all the same."""
    url = sentinel_group.url
    with Producer(url, wait_replicas=1) as p:
        p.publish("q", 1)
        p.publish_many("q", [2, 3])
        p.publish("q", 4, priority=5)
    with Producer(url, wait_replicas=2, wait_timeout=1.0) as p:  # the live replica answers well within it
        for send in (lambda: p.publish("q", 5), lambda: p.publish_many("q", [6, 7]),
                     lambda: p.publish("q", 8, dedup_key="d")):
            with pytest.raises(PublishNotReplicated, match="1 of 2 replica") as caught:
                send()
            assert caught.value.replicas == 1 and caught.value.message_ids
    assert Broker(url, NS).statistics.sizes("q")["pending"] == 8


def test_a_stopped_replica_on_a_cluster_is_named_by_the_publishes_and_acks_of_its_master_only(
        redis_cluster: ClusterTopology, caplog: Any) -> None:
    """A 3-partition queue on the cluster, the replica of one partition's master SIGSTOPped (connected,
    acking nothing): with wait_replicas 1, exactly the publishes that land on that master raise
    PublishNotReplicated (0 of 1), the others are confirmed; a consumer handles every message, saying
    once that its acks there were not replicated; once the replica runs again, publishes there are
    confirmed again."""
    url = redis_cluster.url
    Broker(url, NS).queues.declare_partitions("q", 3)
    parts = partition_names("q", 3)
    master = redis_cluster.master_for_key(QueueKeys(NS, "q~1").pending)
    behind = {p for p in parts if redis_cluster.master_for_key(QueueKeys(NS, p).pending).port == master.port}
    replica = redis_cluster.replica_of(master)
    assert replica.pid is not None
    confirmed: list[str] = []
    refused: list[str] = []
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        # Long enough for a healthy replica on a busy machine; each refused publish waits it out.
        with Producer(url, wait_replicas=1, wait_timeout=1.0) as p:
            for body in range(6):
                try:
                    confirmed.append(p.publish("q", body))
                except PublishNotReplicated as exc:
                    assert exc.replicas == 0 and "0 of 1 replica" in str(exc), exc
                    refused.extend(exc.message_ids)
        with client_for(url) as cluster_client:  # which partition each message went to
            on = {peek_id(frame): part for part in parts
                  for frame in cluster_client.lrange(QueueKeys(NS, part).pending, 0, -1)}
        seen: list[int] = []
        consumer = Consumer(Broker(url, NS, wait_replicas=1, wait_timeout_s=0.5),
                            QueueConfig("q", "x:y", partitions=3), lambda m: seen.append(m.body),
                            fetch_block_s=0.2)
        caplog.set_level(logging.WARNING)
        runner = threading.Thread(target=consumer.run)
        runner.start()
        try:
            wait_for(lambda: len(seen) == 6, message=f"{len(seen)} of 6 handled")
        finally:
            consumer.request_stop()
            runner.join(10)
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    assert sorted(seen) == list(range(6)) and len(on) == 6
    assert refused and {on[mid] for mid in refused} <= behind, (refused, on, behind)
    assert confirmed and not {on[mid] for mid in confirmed} & behind, (confirmed, on, behind)
    assert sum("but 0 of 1 replica" in r.getMessage() for r in caplog.records) == 1
    with Producer(url, wait_replicas=1, wait_timeout=0.5) as p:
        # Three publishes go to the three partitions in turn.
        wait_for(lambda: _goes_through(lambda: [p.publish("q", body) for body in range(3)], PublishNotReplicated),
                 message="the replica, running again, never confirmed")
    wait_for(redis_cluster.intact, message="the cluster is not whole again")  # for the module's next test


def test_a_publish_sent_again_by_text_is_confirmed_by_a_wait_after_it(sentinel_group: SentinelTopology) -> None:
    """A master whose script cache is empty (a promoted replica, a restart) refuses a batch's publish
    with NOSCRIPT; the publish goes again by EVAL, and wait_replicas is confirmed by a WAIT sent after
    that EVAL, not by the batch's own WAIT, which ran before it."""
    sentinel_group.client(sentinel_group.master).script_flush()
    writes = Monitored(sentinel_group.master.url, lambda kind, words: kind != "lua" and words[0].upper() in (
        "EVAL", "EVALSHA", "WAIT"))
    with Producer(sentinel_group.url, wait_replicas=1) as p:
        p.publish_many("q", [1, 2, 3])  # a producer's first publish: one batch with the registry
    order = [words[0].upper() for _, words in writes.stop()]
    assert "EVAL" in order, order
    last_eval = max(i for i, name in enumerate(order) if name == "EVAL")
    assert "WAIT" in order[last_eval:], order
    assert Broker(sentinel_group.url, NS).statistics.sizes("q")["pending"] == 3


def test_wait_replicas_on_a_lone_server_says_so_and_consumers_go_on(redis_url: str, caplog: Any) -> None:
    """No replica at all: a publish raises PublishNotReplicated (0 of 1); a consumer told to wait for one
    replica handles its messages, saying once that its acks were not replicated."""
    with Producer(redis_url, wait_replicas=1, wait_timeout=0.01) as p:
        with pytest.raises(PublishNotReplicated, match="0 of 1"):
            p.publish("q", 1)
        with pytest.raises(PublishNotReplicated):
            p.publish_many("q", [2, 3], delay=0.001)
    seen: list[int] = []
    consumer = Consumer(Broker(redis_url, NS, wait_replicas=1, wait_timeout_s=0.01), QueueConfig("q", "x:y"),
                        lambda m: seen.append(m.body), fetch_block_s=0.2)
    caplog.set_level(logging.WARNING)
    runner = threading.Thread(target=consumer.run)
    runner.start()
    try:
        wait_for(lambda: len(seen) == 1)
    finally:
        consumer.request_stop()
        runner.join(10)
    assert sum("settled on the master, but 0 of 1 replica" in r.getMessage() for r in caplog.records) == 1


_REDIS = "redis:\n  url: redis://127.0.0.1:1/0\n"
_QUEUE = "queues:\n  q:\n    handler: tests.support.handlers:record\n"


@pytest.mark.parametrize(("key", "problem", "document"), [
    *[("redis.wait_replicas", problem, f"{_REDIS}  wait_replicas: {value}\n{_QUEUE}") for value, problem in (
        ("-1", "integer >= 0"), ("1.5", "integer >= 0"), ("x", "integer >= 0"), ("101", "at most 100"),
        ("true", "integer >= 0"), ("[1]", "integer >= 0"), ("1e99", "integer"))],
    *[("redis.wait_timeout", problem, f"{_REDIS}  wait_timeout: {value}\n{_QUEUE}") for value, problem in (
        ("0", "from 1ms to 5s"), ("-1s", "negative"), ("6s", "from 1ms to 5s"), (".nan", "duration"),
        ("1h", "from 1ms to 5s"), ("soon", "duration"))],
    *[("queues.q.partitions", "", f"{_REDIS}{_QUEUE}    partitions: {value}\n")
      for value in ("0", "-2", "65", "2.5", "x", "1e9")],
])
def test_hostile_redis_and_partition_settings_are_one_line_naming_the_key(
        tmp_path: Any, key: str, problem: str, document: str) -> None:
    """wait_replicas, wait_timeout and partitions out of range or of the wrong kind: `smqsup check` exits 2
    with one line naming the key."""
    cfg = tmp_path / "q.yaml"
    cfg.write_text(document)
    result = procs.run("check", "-c", str(cfg))
    assert result.returncode == 2 and key in result.stderr and problem in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("option", "value", "problem"), [
    ("wait_replicas", -1, "integer >= 0"), ("wait_replicas", 1.5, "integer >= 0"), ("wait_replicas", "2", "integer"),
    ("wait_replicas", 10**30, "at most 100"), ("wait_replicas", True, "integer >= 0"),
    ("wait_replicas", None, "integer >= 0"),
    ("wait_timeout", 0, "from 1ms to 5s"), ("wait_timeout", -1, "negative"), ("wait_timeout", float("nan"), "duration"),
    ("wait_timeout", float("inf"), "duration"), ("wait_timeout", 6, "from 1ms to 5s"), ("wait_timeout", None, "duration"),
    ("wait_timeout", "x" * 10_000, "duration"),
])
def test_hostile_producer_wait_settings_are_one_line_before_anything_is_sent(option: str, value: Any,
                                                                             problem: str) -> None:
    """Producer(wait_replicas=, wait_timeout=) of the wrong kind or out of range: a ConfigError naming the
    keyword, on one line, raised before any connection is made (the url's port has nothing behind it)."""
    with pytest.raises(ConfigError, match=problem) as caught:
        Producer(f"redis://127.0.0.1:{free_port()}/0", **{option: value})
    assert str(caught.value).startswith(option) and "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize("url", [
    "redis://:secret-pw@127.0.0.1:1/?" + "a=" * 100_000,
    "redis+cluster://:secret-pw@127.0.0.1:1/?" + "a=" * 100_000,
    "rediss+cluster://:secret-pw@127.0.0.1:1/?ssl_cert_reqs=" + "x" * 100_000,
    "redis+cluster://:secret-pw@" + "h" * 100_000 + ":1/",
    "sentinel://:secret-pw@" + "h" * 100_000 + ":26379/",
])
def test_a_huge_bad_url_is_one_short_line(url: str) -> None:
    """A bad url of 100,000 characters: a ConfigError naming redis.url and the problem in one line of a
    few hundred characters (the url and the problem shown cut short), the password masked, before anything
    is sent."""
    with pytest.raises(ConfigError, match="redis.url") as caught:
        Broker(url)
    text = str(caught.value)
    assert "\n" not in text and len(text) < 600 and "secret-pw" not in text, text[:700]
    assert "..." in text  # the url, cut


@pytest.mark.parametrize(("scheme", "query"), [
    *[(scheme, query) for scheme in ("redis+cluster", "rediss+cluster")
      for query in ("socket_timeout=nan", "socket_timeout=-5", "foo=bar", "socket_timeout=1e999")],
    ("rediss+cluster", "ssl_cert_reqs=bogus"), ("rediss+cluster", "ssl_cert_reqs=" + "x" * 5000)])
def test_a_bad_option_in_a_cluster_url_is_a_config_error_before_any_node_answers(scheme: str, query: str) -> None:
    """A cluster url's options are checked as a one-server url's are: one line naming redis.url, the
    password masked, even while no seed answers."""
    url = f"{scheme}://:secret-pw@127.0.0.1:{free_port()}/?{query}"
    with pytest.raises(ConfigError, match="redis.url") as caught:
        Broker(url)
    assert "secret-pw" not in str(caught.value) and "\n" not in str(caught.value)
