"""Statistics as an operator reads them: ``smqsup status`` (table and --json)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis

from smqsup import browse
from smqsup.broker import Broker
from smqsup.keys import QueueKeys
from smqsup.producer import Producer
from tests import procs
from tests.helpers import wait_for

Q = QueueKeys("smq", "q")


def _status(cfg: Any) -> dict[str, Any]:
    r = procs.run("status", "-c", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_status_reports_exact_counts_and_rates_within_ten_percent(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """A paced run: status --json rates match the measured rate within 10 %, counts are exact."""
    sup = supervise({"q": {"handler": "tests.handlers:record", "consumers": 2}}, notify,
                    heartbeat_interval="500ms")
    notify.wait("READY=1")
    rate, seconds = 200.0, 13.0
    sent = 0
    with Producer(redis_url) as p:
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate) + 1
            if due > sent:
                p.publish_many("q", range(due - sent))
                sent = due
            time.sleep(0.005)  # pacing the producer, not synchronising the test
        measured = sent / (time.monotonic() - start)
        mid = _status(sup.cfg)
    q = mid["queues"]["q"]
    for name in ("published", "acked"):
        assert abs(q["rates"][name] - measured) <= 0.1 * measured, (name, q["rates"][name], measured)
    assert abs(mid["totals"]["rates"]["acked"] - measured) <= 0.1 * measured
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
    sup = supervise({"q": {"handler": "tests.handlers:record", "consumers": 2},
                     "bad": {"handler": "tests.handlers:fail", "retry_threshold": 0}}, notify)
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
        assert broker.pause("mail", by="test") is True
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
