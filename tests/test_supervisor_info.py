"""What each supervisor says of its consumers of a queue (store/ops/supervisors.py): written, read, forgotten,
stale and hostile entries dropped, and shown by status, --json, /api/status and /metrics."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from smqsup.errors import BrokerError
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.ops.supervisors import SupervisorInfo, live
from tests.support import procs
from tests.support.helpers import redis_ms
from tests.support.webserver import WebServer

pytestmark = pytest.mark.topologies

NS = "smq"
#: A time for the tests that need no Redis clock (ms since the epoch).
T = 1_700_000_000_000


def info(now_ms: int, **changes: Any) -> SupervisorInfo:
    """An autoscaled supervisor's info written at ``now_ms``, with ``changes``."""
    base = SupervisorInfo(host="web1", pid=1234, target=3, min=1, max=8, running=3, autoscaled=True, rolling=False,
                          roll_failed=None, scaled={"at_ms": now_ms - 12_000, "from": 2, "to": 3, "why": "lag 7.1s"},
                          every_s=1.0, at_ms=now_ms)
    return dataclasses.replace(base, **changes)


@pytest.fixture
def broker(redis_url: str) -> Iterator[Broker]:
    b = Broker(redis_url, NS)
    try:
        yield b
    finally:
        b.close()


def test_written_infos_read_back_sorted_with_the_hash_expiring(broker: Broker, redis_client: redis.Redis) -> None:
    """write() sets each queue's field and expiry in one go; read() gives them back equal, by host then pid."""
    now = redis_ms(redis_client)
    a, b = info(now, host="web2", pid=7), info(now, host="web1", pid=99, autoscaled=False, min=3, max=3, scaled=None)
    broker.supervisors.write({"orders": a, "mail": a}, "web2:7", keep_s=30)
    broker.supervisors.write({"orders": b}, "web1:99", keep_s=30)
    assert broker.supervisors.read("orders", redis_ms(redis_client)) == [b, a]
    assert broker.supervisors.read("mail", redis_ms(redis_client)) == [a]
    assert broker.supervisors.read("nobody", redis_ms(redis_client)) == []
    assert 0 < redis_client.pttl(QueueKeys(NS, "orders").supervisors) <= 30_000
    assert SupervisorInfo.from_json(a.to_json()) == a and a.field == "web2:7"


def test_forget_removes_the_supervisors_field_from_each_queue(broker: Broker, redis_client: redis.Redis) -> None:
    """forget() deletes this supervisor's field of every queue named, and only that field."""
    now = redis_ms(redis_client)
    broker.supervisors.write({"a": info(now), "b": info(now)}, "web1:1234", keep_s=30)
    broker.supervisors.write({"a": info(now, pid=5)}, "web1:5", keep_s=30)
    broker.supervisors.forget(["a", "b"], "web1:1234")
    broker.supervisors.forget([], "web1:1234")
    assert [i.pid for i in broker.supervisors.read("a", now)] == [5] and broker.supervisors.read("b", now) == []
    assert not redis_client.hexists(QueueKeys(NS, "a").supervisors, "web1:1234")


def test_stale_entries_are_dropped(broker: Broker, redis_client: redis.Redis) -> None:
    """An entry not rewritten for 3 of its intervals (at least 3 s), or dated a day ahead, is left out."""
    now = redis_ms(redis_client)
    entries = {"gone": info(now - 10_000, pid=1), "slow": info(now - 10_000, pid=2, every_s=5.0),
               "quick": info(now - 2_500, pid=3, every_s=0.5), "quick-gone": info(now - 3_500, pid=4, every_s=0.5),
               "ahead": info(now + 2 * 86_400_000, pid=5), "fresh": info(now, pid=6)}
    for field, entry in entries.items():
        broker.supervisors.write({"q": entry}, field, keep_s=60)
    assert [i.pid for i in broker.supervisors.read("q", now)] == [2, 3, 6]


#: Field values a reader skips: not JSON, not an object, a field of the wrong type or implausible.
GARBAGE = [
    b"\xff\xfe", b"not json", b"[1, 2]", b"null", b'"text"', b"{}", b"[" * 100_000,
    *(json.dumps({**info(T).to_dict(), **change}).encode() for change in (
        {"target": "3"}, {"target": -1}, {"target": 10**30}, {"pid": 0}, {"pid": True}, {"autoscaled": 1},
        {"rolling": "no"}, {"every_s": 0}, {"every_s": -1}, {"every_s": 1e300}, {"at_ms": 1.5}, {"at_ms": 10**20},
        {"host": None}, {"host": 7}, {"roll_failed": 3}, {"scaled": "yes"}, {"scaled": {"at_ms": 1, "from": 1}},
        {"scaled": {"at_ms": 1, "from": 1, "to": 2, "why": 5}}, {"max": 2.0})),
    json.dumps(info(T).to_dict()).replace('"every_s": 1.0', '"every_s": NaN').encode(),
    json.dumps(info(T).to_dict()).replace('"every_s": 1.0', '"every_s": Infinity').encode(),
    json.dumps(info(T).to_dict()).replace('"target": 3', '"target": ' + "9" * 5000).encode(),
    json.dumps({k: v for k, v in info(T).to_dict().items() if k != "running"}).encode(),
]


def test_from_json_gives_none_for_garbage_and_caps_text() -> None:
    """from_json never raises: garbage is None; long text is cut to 300 characters, a roll failure to one line."""
    assert [SupervisorInfo.from_json(raw) for raw in GARBAGE] == [None] * len(GARBAGE)
    long = info(T, host="h" * 10_000, roll_failed="first line\nsecond" + "x" * 10_000).to_json()
    read = SupervisorInfo.from_json(long.encode())
    assert read is not None and read.host == "h" * 300 and read.roll_failed == "first line"
    assert SupervisorInfo.from_json(json.dumps({**info(T).to_dict(), "extra": [1]})) == info(T)


def test_garbage_fields_are_skipped_by_read_and_status(broker: Broker, redis_client: redis.Redis,
                                                       redis_url: str) -> None:
    """Hostile fields in the hash: read(), status and --json show only the plausible entry."""
    now = redis_ms(redis_client)
    key = QueueKeys(NS, "q").supervisors
    redis_client.hset(key, mapping={f"bad{i}": raw for i, raw in enumerate(GARBAGE)})
    redis_client.hset(key, "\xff", info(now + 3_600_000).to_json())  # a clock an hour ahead: kept
    redis_client.sadd(f"{NS}:queues", "q")
    assert [i.pid for i in broker.supervisors.read("q", now)] == [1234]
    r = procs.run("status", "--url", redis_url)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert sum(1 for ln in r.stdout.splitlines() if ln.startswith("  q: target")) == 1
    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    assert [s["pid"] for s in snap["queues"]["q"]["supervisors"]] == [1234]


def test_status_shows_target_bounds_scale_event_and_rolls(broker: Broker, redis_client: redis.Redis,
                                                          redis_url: str) -> None:
    """A line per supervisor under the queue table: target (of min..max), host:pid, running, last scale, roll."""
    now = redis_ms(redis_client)
    broker.supervisors.write({"orders": info(now)}, "web1:1234", keep_s=30)
    broker.supervisors.write({"orders": info(now, host="web2", pid=5, rolling=True, scaled=None)}, "web2:5", keep_s=30)
    broker.supervisors.write({"mail": info(now, autoscaled=False, target=2, min=2, max=2, running=1, scaled=None,
                                           roll_failed="consumer #2 not ready\x1b[31m in 30s")}, "web1:1234",
                             keep_s=30)
    redis_client.sadd(f"{NS}:queues", "orders", "mail")
    r = procs.run("status", "--url", redis_url)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("  orders: target", "  mail: target"))]
    assert lines[0] == "  mail: target 2 on web1:1234 (1 running), roll failed: consumer #2 not ready\\x1b[31m in 30s"
    assert re.fullmatch(r"  orders: target 3 of 1\.\.8 on web1:1234 \(3 running\), scaled up 2->3 1\ds ago "
                        r"\(lag 7\.1s\)", lines[1]), lines[1]
    assert lines[2] == "  orders: target 3 of 1..8 on web2:5 (3 running), rolling"
    table = r.stdout.split("\n\n")[0]
    assert all(ln.split()[0] in ("queue", "mail", "orders", "TOTAL") for ln in table.splitlines())
    snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
    [sup] = snap["queues"]["mail"]["supervisors"]
    assert (sup["target"], sup["roll_failed"], sup["autoscaled"]) == (2, "consumer #2 not ready\x1b[31m in 30s", False)


def test_api_status_and_metrics_show_each_supervisors_target_and_roll(
        broker: Broker, redis_client: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    """/api/status lists the supervisors; /metrics has smqsup_consumers_target and smqsup_roll_failed per supervisor."""
    now = redis_ms(redis_client)
    broker.supervisors.write({"orders": info(now, roll_failed="boom")}, "web1:1234", keep_s=30)
    broker.supervisors.write({"orders": info(now, host="web2", pid=5, target=4)}, "web2:5", keep_s=30)
    redis_client.sadd(f"{NS}:queues", "orders")
    server = WebServer("--url", redis_url, "--listen", "127.0.0.1:0", log_dir=tmp_path)
    try:
        sups = server.json("/api/status")["queues"]["orders"]["supervisors"]
        text = server.request("GET", "/metrics")[2].decode()
    finally:
        assert server.stop() == 0, server.log()
    assert [(s["host"], s["target"], s["roll_failed"], s["scaled"]["to"]) for s in sups] == [
        ("web1", 3, "boom", 3), ("web2", 4, None, 3)]
    samples = {(s.name, s.labels["supervisor"]): s.value for fam in text_string_to_metric_families(text)
               for s in fam.samples if s.name in ("smqsup_consumers_target", "smqsup_roll_failed")}
    assert samples == {("smqsup_consumers_target", "web1:1234"): 3, ("smqsup_consumers_target", "web2:5"): 4,
                       ("smqsup_roll_failed", "web1:1234"): 1, ("smqsup_roll_failed", "web2:5"): 0}
    for name in ("smqsup_consumers_target", "smqsup_roll_failed"):
        assert f"# TYPE {name} gauge" in text and f"# HELP {name} " in text


def test_redis_errors_are_broker_errors(broker: Broker, redis_client: redis.Redis) -> None:
    """A supervisors key of another type: write and read raise BrokerError, not redis-py's errors."""
    redis_client.set(QueueKeys(NS, "odd").supervisors, "a string")
    with pytest.raises(BrokerError):
        broker.supervisors.write({"odd": info(T)}, "web1:1234", keep_s=30)
    with pytest.raises(BrokerError):
        broker.supervisors.read("odd", T)


def test_live_reads_a_hash_as_hgetall_gives_it() -> None:
    """live(): bytes or text values, garbage skipped, sorted by host then pid, freshness by the given clock."""
    raw = {b"b:2": info(T, host="b", pid=2).to_json().encode(), "a:9": info(T, host="a", pid=9).to_json(),
           b"x": b"\xff", b"a:1": info(T, host="a", pid=1).to_json().encode()}
    assert [(i.host, i.pid) for i in live(raw, T)] == [("a", 1), ("a", 9), ("b", 2)]
    assert live(raw, T + 3001) == []
