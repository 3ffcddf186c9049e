"""What status, the JSON API, the web page's snapshot and /metrics show of schedules (last and next fire,
paused, live declarations), and that no bytes in Redis break them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from smqsup.collector import stats
from smqsup.config.schedule import ScheduleConfig
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.web import metrics
from smqsup.web.server import build_app
from smqsup.web.source import Source
from tests.support import procs
from tests.test_web_hostile import DEEP, seed_hostile, strict_json

K = QueueKeys("smq", "q")


def _stored(redis_url: str, redis_client: "redis.Redis") -> int:
    """Schedule "tick" (every 10 s) on queue q, declared, last fired at a known slot; that slot (ms)."""
    broker = Broker(redis_url)
    broker.client.sadd("smq:queues", "q")
    broker.schedules.upsert(ScheduleConfig("tick", "q", every_ms=10_000), "web1:1:ab", 60_000)
    now = int(redis_client.time()[0]) * 1000
    last = now // 10_000 * 10_000
    redis_client.hset(K.schedule("tick"), mapping={"last_fire_ms": last, "fires": 7})
    return last


def _api(source: Source, path: str) -> tuple[int, bytes]:
    async def get() -> tuple[int, bytes]:
        async with TestClient(TestServer(build_app(source, None))) as client:
            resp = await client.get(path)
            return resp.status, await resp.read()

    return asyncio.run(get())


def test_status_api_and_metrics_show_last_and_next_fire(redis_url: str, redis_client: "redis.Redis") -> None:
    """status --json and /api/status: one row with the last slot and the next one 10 s on; the table a
    line; /metrics the gauges by schedule and queue."""
    last = _stored(redis_url, redis_client)
    r = procs.run("status", "--url", redis_url, "--json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["schedules"]
    assert row["name"] == "tick" and row["queue"] == "q" and row["every_s"] == 10 and row["paused"] is False
    assert row["last_fire"] == last / 1000 and row["next_fire"] == last / 1000 + 10
    assert row["declarers"] == 1 and row["fires"] == 7 and row["error"] is None
    table = procs.run("status", "--url", redis_url).stdout
    assert any(line.split()[:3] == ["tick", "q", "every"] for line in table.splitlines()), table
    source = Source(Broker(redis_url), ["q"])
    try:
        status, body = _api(source, "/api/status")
        assert status == 200 and strict_json(body)["schedules"] == [row]
        status, body = _api(source, "/metrics")
    finally:
        source.close()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    labels = {"schedule": "tick", "queue": "q"}
    assert [(s.labels, s.value) for s in families["smqsup_schedule_last_fire_seconds"].samples] == [(labels, last / 1000)]
    assert [s.value for s in families["smqsup_schedule_next_fire_seconds"].samples] == [last / 1000 + 10]
    assert [s.value for s in families["smqsup_schedule_paused"].samples] == [0]
    assert [s.value for s in families["smqsup_schedule_declarers"].samples] == [1]


def seed_hostile_schedules(client: "redis.Redis", queue: str = "q") -> None:
    """Garbage in every schedule key a reader touches: names no key may carry, definitions that are not
    definitions, times that are not times, declarations no clock wrote."""
    k = QueueKeys("smq", queue)
    client.sadd("smq:queues", queue, "wrong")
    client.hset(k.schedules, mapping={
        b"\xff\xfe": b"{}", "a:b": b"{}", "{x}": b"{}", "x" * 300: b"{}", "junk": b"not json", "deep": DEEP,
        "inf": b'{"v":1,"queue":"q","every_ms":1e999}', "old": b'{"v":1,"queue":"q","cron":"0 3 * * *",'
        b'"timezone":"Europe/Berlin"}', "big": b'{"v":1,"queue":"q","every_ms":' + b"9" * 400 + b"}",
        "ok": b'{"v":1,"queue":"q","every_ms":1000}'})
    client.hset(k.schedule("old"), mapping={"since_ms": b"-99999999999999", "last_fire_ms": b"1e999",
                                            "fires": b"\xff"})
    client.hset(k.schedule("ok"), mapping={"since_ms": b"nan", "last_fire_ms": b"9" * 400, "fires": b"-1"})
    client.zadd(k.schedule_declarers("ok"), {"forged": float("inf"), b"\xff": float("-inf"), "late": 1e300})
    client.set(k.schedule_paused("ok"), b"\xff")
    client.set(k.schedule("junk"), b"a string, not a hash")
    client.set(QueueKeys("smq", "wrong").schedules, b"a string, not a hash")


def test_hostile_schedule_bytes_leave_status_api_metrics_and_the_snapshot_whole(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """Over garbage in every schedule key (and the queue's other keys): status exits 0 with strict JSON and
    a table, /api/status and /metrics answer 200 and parse, unusable definitions are rows with an error."""
    seed_hostile(redis_client)
    seed_hostile_schedules(redis_client)
    r = procs.run("status", "--url", redis_url, "--json")
    assert r.returncode == 0, r.stderr
    rows: list[dict[str, Any]] = strict_json(r.stdout.encode())["schedules"]
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == {"junk", "deep", "inf", "old", "big", "ok"}  # no name that cannot form a key
    assert all(by_name[n]["error"] for n in ("junk", "deep", "inf", "big"))
    ok = by_name["ok"]
    assert ok["paused"] is True and ok["declarers"] == 0 and ok["last_fire"] is None and ok["next_fire"] is None
    assert by_name["old"]["error"] is None and by_name["old"]["last_fire"] is None
    r = procs.run("status", "--url", redis_url)
    assert r.returncode == 0 and "not JSON" in r.stdout, r.stderr
    r = procs.run("schedules", "--url", redis_url)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    source = Source(Broker(redis_url), ["q"])
    try:
        status, body = _api(source, "/api/status")
        assert status == 200 and len(strict_json(body)["schedules"]) == 6
        status, body = _api(source, "/metrics")
        assert status == 200
    finally:
        source.close()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert len(families["smqsup_schedule_paused"].samples) == 6
    snap = stats.snapshot(Broker(redis_url), ["q", "wrong"])
    metrics.render(snap)  # a second queue whose schedules key is a string: no rows from it, no error
    assert len(snap["schedules"]) == 6
