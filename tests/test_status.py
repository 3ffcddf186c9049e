"""Statistics as an operator reads them: ``smqsup status`` (table and --json)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.views import browse
from tests.support import procs
from tests.support.helpers import wait_for

pytestmark = pytest.mark.topologies

Q = QueueKeys("smq", "q")


def _status(cfg: Any) -> dict[str, Any]:
    r = procs.run("status", "-c", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.single_node("rates timed over seconds; the other status tests read the cluster")
@pytest.mark.exclusive
def test_status_reports_exact_counts_and_rates_within_ten_percent(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """A paced run: status --json rates match the measured rate within 10 %, counts are exact."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2}}, notify,
                    heartbeat_interval="500ms")
    notify.wait("READY=1")
    rate, seconds = 200.0, 13.0
    sent = 0
    # status runs (in another process) while the pace goes on, so the rates it reads cover
    # publishing throughout, however long its own start takes.
    read: dict[str, Any] = {}
    status = threading.Thread(target=lambda: read.update(mid=_status(sup.cfg)))
    with Producer(redis_url) as p:
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds or status.ident is None or status.is_alive():
            if elapsed >= seconds and status.ident is None:
                status.start()
            due = int(elapsed * rate) + 1
            if due > sent:
                p.publish_many("q", range(due - sent))
                sent = due
            time.sleep(0.005)  # pacing the producer, not synchronising the test
        measured = sent / (time.monotonic() - start)
    status.join()
    assert "mid" in read, "smqsup status --json failed (its error is above)"
    q = read["mid"]["queues"]["q"]
    for name in ("published", "acked"):
        assert abs(q["rates"][name] - measured) <= 0.1 * measured, (name, q["rates"][name], measured)
    assert abs(read["mid"]["totals"]["rates"]["acked"] - measured) <= 0.1 * measured
    wait_for(lambda: redis_client.llen(Q.pending) == 0 and _status(sup.cfg)["queues"]["q"]["counters"]["acked"]
             == sent, timeout_s=10)
    final = _status(sup.cfg)
    q = final["queues"]["q"]
    assert q["counters"]["published"] == sent and q["counters"]["acked"] == sent
    assert q["counters"]["retried"] == 0 and q["counters"]["dead_lettered"] == 0
    # Per-consumer counters (in the heartbeats) add up too, within one heartbeat.
    wait_for(lambda: sum(c["acked"] for c in _status(sup.cfg)["queues"]["q"]["consumers"]) == sent)
    consumers = _status(sup.cfg)["queues"]["q"]["consumers"]
    assert len(consumers) == 2 and all(c["rss"] > 0 and c["heartbeat_age_s"] < 2 for c in consumers)
    assert q["leader"] and q["leader"].split(":")[1] == str(sup.pid)
    [producer] = [p for p in final["producers"] if p["published"] == sent]
    assert producer["pid"] > 0


def test_status_table_for_people(supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket,
                                 redis_url: str) -> None:
    """The table names each queue, its sizes and rates, and each consumer with CPU and memory."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2},
                     "bad": {"handler": "tests.support.handlers:fail", "retry_threshold": 0}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        p.publish_many("q", range(10))
        p.publish("bad", "x")
    wait_for(lambda: _status(sup.cfg)["queues"]["bad"]["sizes"]["dead"] == 1)
    r = procs.run("status", "-c", str(sup.cfg))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:6] == ["queue", "pending", "processing", "scheduled", "retrying", "dead"]
    [bad] = [ln for ln in lines if ln.split()[:1] == ["bad"] and ln.split()[1].isdigit()]
    assert bad.split()[5] == "1"
    assert sum(1 for ln in lines if ln.startswith("q #")) == 2, r.stdout
    assert "rss MB" in r.stdout and "heartbeat" in r.stdout
    assert any(ln.startswith("TOTAL") for ln in lines)


def test_status_from_a_url_without_a_config(redis_url: str) -> None:
    """`status --url` works from any host that reaches Redis, listing known queues."""
    with Producer(redis_url) as p:
        p.publish_many("elsewhere", [1, 2, 3])
    r = procs.run("status", "--url", redis_url, "--json")
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert snap["queues"]["elsewhere"]["sizes"]["pending"] == 3
    assert snap["queues"]["elsewhere"]["counters"]["published"] == 3


def test_status_shows_scheduled_paused_and_the_new_events(redis_url: str) -> None:
    """Table: a scheduled column, "(paused)" after a paused queue's name, expired/deduplicated/removed; JSON too."""
    with Producer(redis_url) as p:
        later = p.publish("mail", "hi", delay=600, dedup_key="k")
        p.publish("mail", "again", dedup_key="k")  # deduplicated
        p.publish("mail", "soon", delay=600)
        p.publish_many("mail", [1, 2])
    broker = Broker(redis_url)
    try:
        assert broker.queues.pause("mail", by="test") is True
        assert browse.remove(broker, "mail", [later]) == {later: True}
    finally:
        broker.close()
    r = procs.run("status", "--url", redis_url)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = lines[0].split()
    [row] = [ln for ln in lines if ln.startswith("mail (paused) ")]
    cells = dict(zip(header[1:6], row[len("mail (paused)"):].split()[:5]))
    assert cells == {"pending": "2", "processing": "0", "scheduled": "1", "retrying": "0", "dead": "0"}
    assert "  mail: 1 deduplicated, 1 removed (since the queue was created)" in lines

    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    mail = snap["queues"]["mail"]
    assert mail["paused"] is True and mail["sizes"]["scheduled"] == 1 and snap["totals"]["scheduled"] == 1
    assert (mail["counters"]["deduplicated"], mail["counters"]["removed"], mail["counters"]["expired"]) == (1, 1, 0)


def _table_rows(text: str, heading: str) -> dict[str, dict[str, str]]:
    """The rows of every table in ``text`` whose header starts with ``heading``, by first cell, as
    {column: cell} (cells are apart by two spaces or more, a heading or a cell holds single spaces)."""
    rows: dict[str, dict[str, str]] = {}
    for table in text.split("\n\n"):
        header, *lines = table.splitlines()
        if header.startswith(heading + " "):
            columns = re.split(r" {2,}", header)[1:]
            rows.update((cells[0], dict(zip(columns, cells[1:]))) for cells in (re.split(r" {2,}", ln) for ln in lines))
    return rows


def test_status_shows_messages_in_flight_per_consumer_and_per_queue(redis_url: str) -> None:
    """Each consumer's messages in flight of its concurrency ("37/50"), each queue's and the total's sums; JSON too."""
    broker = Broker(redis_url)
    try:
        for queue, cid, info in [
                ("orders", "c1", ConsumerInfo(pid=11, host="h", index=1, busy=True, in_flight=37, concurrency=50)),
                ("orders", "c2", ConsumerInfo(pid=12, host="h", index=2, in_flight=0, concurrency=50)),
                ("orders", "old", ConsumerInfo(pid=13, host="h", index=3, busy=True)),  # written before in_flight
                ("mail", "c3", ConsumerInfo(pid=21, host="h", index=1, busy=True, in_flight=1, concurrency=1))]:
            broker.registry.register_consumer(queue, cid, info)
    finally:
        broker.close()
    with Producer(redis_url) as p:
        p.publish("idle", "nobody takes me")

    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    orders, mail, idle = (snap["queues"][name] for name in ("orders", "mail", "idle"))
    assert [(c["in_flight"], c["concurrency"]) for c in orders["consumers"]] == [(37, 50), (0, 50), (None, None)]
    assert (orders["in_flight"], orders["concurrency"]) == (37, 100)
    assert (mail["in_flight"], mail["concurrency"], idle["in_flight"], idle["concurrency"]) == (1, 1, 0, 0)
    assert (snap["totals"]["in_flight"], snap["totals"]["concurrency"]) == (38, 101)

    r = procs.run("status", "--url", redis_url)
    assert r.returncode == 0, r.stderr
    queues = _table_rows(r.stdout, "queue")
    assert {name: row["in flight"] for name, row in queues.items()} == {
        "idle": "-", "mail": "1/1", "orders": "37/100", "TOTAL": "38/101"}
    consumers = _table_rows(r.stdout, "consumer")
    assert {name: (row["state"], row["in flight"]) for name, row in consumers.items()} == {
        "mail #1": ("busy", "1/1"), "orders #1": ("busy", "37/50"), "orders #2": ("idle", "0/50"),
        "orders #3": ("busy", "-")}


#: Registry entries whose messages in flight or concurrency are garbage: (index, JSON fields).
GARBAGE_FLIGHT = [
    (1, b'"in_flight": -1, "concurrency": -5'),
    (2, b'"in_flight": "37", "concurrency": "50"'),
    (3, b'"in_flight": NaN, "concurrency": Infinity'),
    (4, b'"in_flight": ' + b"9" * 400 + b', "concurrency": 9223372036854775807'),
    (5, b'"in_flight": 1001, "concurrency": 0'),
    (6, b'"in_flight": [1], "concurrency": {"a": 1}'),
    (7, b'"in_flight": true, "concurrency": 2.5'),
    (8, b'"host": "h"'),  # neither
]


def test_status_shows_a_dash_for_garbage_in_flight_and_concurrency(redis_url: str,
                                                                   redis_client: "redis.Redis") -> None:
    """Negative, huge, text, NaN, nested or missing in_flight/concurrency: one clean line each showing "-"."""
    entries = {f"c{i}": b'{"index": %d, ' % i + fields + b"}" for i, fields in GARBAGE_FLIGHT}
    entries["c9"] = b'{"index": 9, "in_flight": 3, "concurrency": "x"}'  # half known
    redis_client.sadd("smq:queues", "q")
    redis_client.hset(Q.consumers, mapping=entries)
    redis_client.zadd(Q.heartbeats, dict.fromkeys(entries, 1))
    r = procs.run("status", "--url", redis_url)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    consumers = _table_rows(r.stdout, "consumer")
    assert {name: row["in flight"] for name, row in consumers.items()} == {
        **{f"q #{i}": "-" for i, _ in GARBAGE_FLIGHT}, "q #9": "3/-"}
    assert sum(1 for ln in r.stdout.splitlines() if ln.startswith("q #")) == 9
    assert _table_rows(r.stdout, "queue")["q"]["in flight"] == "-"
    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    assert (snap["queues"]["q"]["in_flight"], snap["queues"]["q"]["concurrency"]) == (3, 0)


@pytest.mark.parametrize("victim", ["pending", "scheduled", "dead", "consumers", "counters", "processing"])
def test_a_key_of_the_wrong_type_costs_status_that_count_and_is_named(redis_url: str, redis_client: redis.Redis,
                                                                      victim: str) -> None:
    """One queue's key overwritten by a string: status (table and --json) still reads every queue, that
    queue's count reads as empty, and a key the scripts need is named as of the wrong type."""
    with Producer(redis_url) as p:
        p.publish_many("fine", [1, 2])
        p.publish("bad", 1)
    bad = QueueKeys("smq", "bad")
    if victim == "processing":
        Broker(redis_url).registry.register_consumer("bad", "c1", ConsumerInfo(pid=1))
        key = bad.processing("c1")
    else:
        key = getattr(bad, victim)
        redis_client.delete(key)
    redis_client.set(key, "junk")
    r = procs.run("status", "--url", redis_url, "--json")
    assert r.returncode == 0, r.stderr
    snap = json.loads(r.stdout)
    assert snap["queues"]["fine"]["sizes"]["pending"] == 2
    wanted = {"pending": "list", "scheduled": "zset", "dead": "list"}.get(victim)
    assert snap["queues"]["bad"]["wrong_type_keys"] == ([f"{key} holds a string, not a {wanted}"] if wanted else [])
    table = procs.run("status", "--url", redis_url)
    assert table.returncode == 0, table.stderr
