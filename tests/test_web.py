"""The web server as users run it (``smqsup web`` in a subprocess), without a
browser: JSON API, /metrics, the WebSocket feed, and its access rules."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import aiohttp
import psutil
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from smqsup.client.producer import Producer
from smqsup.config import model as config
from smqsup.errors import ConfigError
from smqsup.keys import QueueKeys
from smqsup.launch.discovery import free_port
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.web import metrics
from smqsup.web.security import check_exposure, same_origin
from tests.support import procs
from tests.support.helpers import holds, wait_for
from tests.support.webserver import WebServer

pytestmark = pytest.mark.topologies

TOKEN = "s3cret-token"
ORDERS = "queues:\n  orders:\n    handler: myapp.handlers:process_order\n"

WebFactory = Callable[..., WebServer]


@pytest.fixture
def web(tmp_path: Path, redis_url: str) -> Iterator[WebFactory]:
    """Start ``smqsup web --url URL --listen 127.0.0.1:0 [ARGS]`` (URL: the private
    Redis unless given); each logs to its own file and is stopped at teardown."""
    started: list[WebServer] = []

    def _start(*args: str, url: str = redis_url, extra_env: Optional[dict[str, str]] = None) -> WebServer:
        log_dir = tmp_path / f"web{len(started)}"
        log_dir.mkdir()
        server = WebServer("--url", url, "--listen", "127.0.0.1:0", *args, log_dir=log_dir, extra_env=extra_env)
        started.append(server)
        return server

    yield _start
    for server in started:
        assert server.stop() == 0, server.log()


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition: (name, labels) -> value."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _dead_letter(supervise: Callable[..., procs.Supervisor], redis_url: str, body: Any) -> str:
    """Publish ``body`` to queue 'bad' (handler always fails, retry_threshold 0),
    wait for its dead letter, stop the supervisor; returns the message id."""
    sup = supervise({"bad": {"handler": "tests.support.handlers:fail", "retry_threshold": 0}})
    with Producer(redis_url) as p:
        mid = p.publish("bad", body)
    broker = Broker(redis_url)
    try:
        wait_for(lambda: broker.statistics.sizes("bad")["dead"] == 1, 30, message="no dead letter")
    finally:
        broker.close()
    sup.stop()
    return mid


def test_status_and_metrics_report_sizes_counters_consumers_and_leader(
        supervise: Callable[..., procs.Supervisor], redis_url: str, web: WebFactory) -> None:
    """/api/status and /metrics agree with what was published, acked and dead-lettered."""
    supervise({"work": {"handler": "tests.support.handlers:record", "consumers": 2},
               "bad": {"handler": "tests.support.handlers:fail", "retry_threshold": 0}})
    with Producer(redis_url) as p:
        p.publish_many("work", [{"n": i} for i in range(5)])
        p.publish("bad", "doomed")
        p.publish_many("idle", [1, 2, 3])
    server = web()

    def settled() -> Any:
        snap = server.json("/api/status")
        work, bad = snap["queues"]["work"], snap["queues"]["bad"]
        ready = (work["counters"]["acked"] == 5 and bad["sizes"]["dead"] == 1 and len(work["consumers"]) == 2
                 and all(c.get("rss") for c in work["consumers"]) and work["leader"])
        return snap if ready else None

    snap = wait_for(settled, 30, interval_s=0.1, message="status never showed the work done")
    assert snap["queues"]["idle"]["sizes"]["pending"] == 3
    assert snap["queues"]["work"]["counters"]["published"] == 5
    assert snap["queues"]["bad"]["counters"]["dead_lettered"] == 1
    assert snap["totals"]["pending"] == 3 and snap["totals"]["consumers"] == 3

    status, headers, body = server.request("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = _samples(body.decode())
    assert samples[("smqsup_queue_messages", frozenset({("queue", "idle"), ("state", "pending")}))] == 3
    assert samples[("smqsup_messages_total", frozenset({("queue", "work"), ("event", "acked")}))] == 5
    assert samples[("smqsup_messages_total", frozenset({("queue", "bad"), ("event", "dead_lettered")}))] == 1
    assert samples[("smqsup_consumers", frozenset({("queue", "work")}))] == 2
    rss = [v for (name, labels), v in samples.items()
           if name == "smqsup_consumer_rss_bytes" and ("queue", "work") in labels]
    assert len(rss) == 2 and all(v > 1 << 20 for v in rss)
    cpu = [labels for (name, labels), _ in samples.items() if name == "smqsup_consumer_cpu_percent"]
    assert len(cpu) == 3 and all({"consumer", "host", "pid"} <= dict(lb).keys() for lb in cpu)
    assert [v for (name, labels), v in samples.items()
            if name == "smqsup_gc_leader" and ("queue", "work") in labels] == [1]


def test_metrics_escape_label_values() -> None:
    """Backslashes, quotes and newlines in label values survive a Prometheus parser."""
    host = 'we"ird\\host\nname'
    consumer = {"id": "c1", "host": host, "pid": 7, "cpu": 12.5, "rss": 1024, "received": 3}
    snap = {"t": 0, "producers": [], "queues": {"q": {
        "sizes": {"pending": 0, "processing": 0, "scheduled": 0, "delayed": 0, "dead": 0},
        "counters": {"published": 0, "acked": 0, "retried": 0, "dead_lettered": 0, "reclaimed": 0, "late_acks": 0,
                     "dlq_requeued": 0, "expired": 0, "deduplicated": 0, "removed": 0, "rejected": 0},
        "consumers": [consumer], "leader": None, "slots": {f"{host}:#1": {"restarts": 2}}}}}
    samples = _samples(metrics.render(snap))
    labels = frozenset({("queue", "q"), ("consumer", "c1"), ("host", host), ("pid", "7")})
    assert samples[("smqsup_consumer_cpu_percent", labels)] == 12.5
    assert samples[("smqsup_consumer_messages_total", labels)] == 3
    assert samples[("smqsup_consumer_slot_restarts_total", frozenset({("queue", "q"), ("slot", f"{host}:#1")}))] == 2


def test_a_token_guards_every_read(web: WebFactory) -> None:
    """With a token: 401 without it; Bearer works; ?token= on the page sets a cookie that works."""
    server = web("--token", TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for path in ("/", "/api/status", "/metrics", "/api/queues/q/dead"):
        status, headers, _ = server.request("GET", path)
        assert status == 401 and headers["www-authenticate"].startswith("Bearer"), path
        assert server.request("GET", path, headers={"Authorization": "Bearer wrong"})[0] == 401, path
        assert server.request("GET", path, headers=bearer)[0] == 200, path
    assert server.request("GET", f"/api/status?token={TOKEN}")[0] == 401  # only the page and /ws take ?token=

    status, headers, _ = server.request("GET", f"/?token={TOKEN}")
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"].split(";")[0]
    assert TOKEN not in cookie and "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
    assert server.request("GET", "/api/status", headers={"Cookie": cookie})[0] == 200
    status, headers, body = server.request("GET", "/", headers={"Cookie": cookie})
    assert status == 200 and b'data-testid="chart-total-rates"' in body
    assert "script-src 'self'" in headers["content-security-policy"]


def test_requeue_needs_the_token_and_the_same_origin(
        supervise: Callable[..., procs.Supervisor], redis_url: str, web: WebFactory) -> None:
    """POST: 401 without token, 403 cross-origin or without Origin; same-origin requeues to pending."""
    mid = _dead_letter(supervise, redis_url, {"order": 1})
    server = web("--token", TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    path = "/api/queues/bad/dead/requeue"
    assert server.request("POST", path, {"ids": [mid]}, origin=True)[0] == 401
    assert server.request("POST", path, {"ids": [mid]}, {**bearer, "Origin": "http://evil.example"})[0] == 403
    assert server.request("POST", path, {"ids": [mid]}, bearer)[0] == 403  # no Origin
    assert server.request("POST", "/api/queues/a:b/dead/requeue", {"ids": [mid]}, bearer, origin=True)[0] == 400
    assert server.request("POST", path, {"ids": "nope"}, bearer, origin=True)[0] == 400

    [entry] = server.json("/api/queues/bad/dead?limit=10", **bearer)["entries"]
    assert entry["id"] == mid and entry["body"] == {"order": 1} and entry["reason"].startswith("ValueError")
    assert entry["attempts"] >= 1 and entry["dead_at"] > 0

    status, _, body = server.request("POST", path, {"ids": [mid]}, bearer, origin=True)
    assert status == 200 and json.loads(body) == {"queue": "bad", "requeued": 1}
    snap = server.json("/api/status", **bearer)
    assert snap["queues"]["bad"]["sizes"] == {"pending": 1, "processing": 0, "scheduled": 0, "delayed": 0, "dead": 0}


def test_purge_by_id_and_all(supervise: Callable[..., procs.Supervisor], redis_url: str, web: WebFactory) -> None:
    """Purge by an unknown id removes nothing; purge all empties the dead-letter list."""
    _dead_letter(supervise, redis_url, "x")
    server = web()
    path = "/api/queues/bad/dead/purge"
    assert json.loads(server.request("POST", path, {"ids": ["no-such-id"]}, origin=True)[2])["purged"] == 0
    assert json.loads(server.request("POST", path, {"all": True}, origin=True)[2])["purged"] == 1
    assert server.json("/api/queues/bad/dead")["total"] == 0


def test_without_a_token_only_loopback_hosts_and_same_origin_writes(web: WebFactory) -> None:
    """No token: a foreign Host (DNS rebinding) and cross-origin POST or WebSocket get 403."""
    server = web()
    port = server.address.rsplit(":", 1)[1]
    assert server.request("GET", "/api/status", headers={"Host": f"evil.example:{port}"})[0] == 403
    assert server.request("GET", "/api/status", headers={"Host": f"localhost:{port}"})[0] == 200
    path = "/api/queues/q/dead/purge"
    assert server.request("POST", path, {"all": True}, {"Origin": "http://evil.example"})[0] == 403
    assert server.request("POST", path, {"all": True}, {"Origin": f"http://localhost:{port}"})[0] == 403
    assert server.request("POST", path, {"all": True}, origin=True)[0] == 200
    ws_headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                  "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example"}
    assert server.request("GET", "/ws", headers=ws_headers)[0] == 403


def test_websocket_sends_history_then_a_snapshot_every_second(redis_url: str, web: WebFactory) -> None:
    """The feed opens with every queue's history, then snapshots whose counters follow publishes."""
    with Producer(redis_url) as p:
        p.publish("feed", 1)
    server = web("--token", TOKEN)

    async def read() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"{server.url}/ws?token={TOKEN}", origin=server.url) as ws:
                first, second = await ws.receive_json(timeout=10), await ws.receive_json(timeout=10)
                with Producer(redis_url) as p:
                    p.publish_many("feed", [2, 3])
                later = await ws.receive_json(timeout=10)
                while later["snapshot"]["queues"]["feed"]["counters"]["published"] < 3:
                    later = await ws.receive_json(timeout=10)
                return [first, second, later]

    first, second, later = asyncio.run(asyncio.wait_for(read(), 20))
    assert first["type"] == "history" and first["window_s"] == 600 and first["queues"] == {"feed": []}
    assert second["type"] == "snapshot" and second["snapshot"]["queues"]["feed"]["sizes"]["pending"] == 1
    assert later["snapshot"]["queues"]["feed"]["sizes"]["pending"] == 3
    assert later["snapshot"]["t"] > second["snapshot"]["t"]


def test_listen_and_origin_rules() -> None:
    """Loopback (v4, v6, localhost) needs no token, anything else does; Origin must name the Host."""
    assert check_exposure("127.0.0.1:0", None) == ("127.0.0.1", 0)
    assert check_exposure("[::1]:8087", None) == ("::1", 8087)
    assert check_exposure("localhost:8087", None) == ("localhost", 8087)
    assert check_exposure("0.0.0.0:8087", "t") == ("0.0.0.0", 8087)
    for listen in ("0.0.0.0:8087", "[::]:8087", "example.com:80"):
        with pytest.raises(ConfigError, match="not a loopback address"):
            check_exposure(listen, None)
    with pytest.raises(ConfigError, match="web.listen: expected a port from 0 to 65535"):
        check_exposure("127.0.0.1:99999", None)
    assert same_origin("http://127.0.0.1:8087", "127.0.0.1:8087")
    assert same_origin("http://Example.com", "example.com:80")
    assert same_origin("http://[::1]:8087", "[::1]:8087")
    assert not same_origin("http://127.0.0.1:8088", "127.0.0.1:8087")
    assert not same_origin("http://evil.example", "127.0.0.1:8087")
    assert not same_origin("null", "127.0.0.1:8087")


def test_one_listen_rule_for_the_config_and_the_web_command_but_port_0() -> None:
    """web.listen and `smqsup web --listen` share their form, texts and loopback names; only the command takes port 0."""
    for listen in ("localhost:8087", "LOCALHOST:8087", "ui.localhost:8087", "127.0.0.2:8087", "[::1]:8087"):
        assert config.loads(f"{ORDERS}web:\n  listen: '{listen}'\n").web == config.WebConfig(listen)
        assert check_exposure(listen, None)[1] == 8087
    for listen, problem in (("127.0.0.1", "expected host:port"), ("[fe::zz]:1", "expected host:port"),
                            ("[1:2:3]:80", "invalid IPv6 address"), ("127.0.0.1:70000", "expected a port from")):
        with pytest.raises(ConfigError, match=f"web.listen: {re.escape(problem)}"):
            config.loads(f"{ORDERS}web:\n  listen: '{listen}'\n")
        with pytest.raises(ConfigError, match=f"web.listen: {re.escape(problem)}"):
            check_exposure(listen, None)
    with pytest.raises(ConfigError, match="web.listen: expected a port from 1 to 65535, got '127.0.0.1:0'"):
        config.loads(f"{ORDERS}web:\n  listen: '127.0.0.1:0'\n")
    assert check_exposure("127.0.0.1:0", None) == ("127.0.0.1", 0)


def test_non_loopback_listen_without_a_token_exits_2_with_one_line() -> None:
    """0.0.0.0 without a token: exit 2, one 'Error:' line, nothing served."""
    env = procs.env()
    env.pop("SMQSUP_WEB_TOKEN", None)
    result = procs.run("web", "--url", "redis://127.0.0.1:1", "--listen", "0.0.0.0:0", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: web.listen: 0.0.0.0:0 is not a loopback address")


PASSWORD = "redis-pass-in-url"


@pytest.mark.single_node("requirepass set on one server")
def test_redis_errors_show_neither_password_nor_token(redis_client: redis.Redis, redis_url: str,
                                                       web: WebFactory) -> None:
    """A Redis refusing the url's password, or not listening: 503 bodies and the log show no password or token."""
    redis_client.config_set("requirepass", "another-one")
    for url in (f"{redis_url}?password={PASSWORD}", f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"):
        server = web("--token", TOKEN, url=url)
        status, headers, body = server.request("GET", f"/api/status?x={TOKEN}",
                                               headers={"Authorization": f"Bearer {TOKEN}"})
        assert status == 503 and headers["content-type"].startswith("application/json"), body
        assert PASSWORD.encode() not in body and TOKEN.encode() not in body and json.loads(body)["error"]
        server.stop()
        assert "failed" in server.log() and PASSWORD not in server.log() and TOKEN not in server.log()


def _title(server: WebServer) -> str:
    return " ".join(psutil.Process(server.proc.pid).cmdline()).strip()


def test_the_process_title_shows_neither_token_nor_password(redis_url: str, web: WebFactory) -> None:
    """Once listening, ps shows 'smqsup: web ADDRESS': no token, no url password; --token is warned about."""
    server = web("--token", TOKEN, url=f"{redis_url}?password={PASSWORD}")
    title = _title(server)
    assert title == f"smqsup: web {server.address}", title
    assert "--token on the command line is visible to other users" in server.log()


def test_the_token_can_come_from_a_file_or_the_environment(tmp_path: Path, web: WebFactory) -> None:
    """--token-file FILE (its first line) and $SMQSUP_WEB_TOKEN guard the API like --token, unseen by ps."""
    token_file = tmp_path / "token"
    token_file.write_text(f"  {TOKEN}  \nnot this line\n")
    for server in (web("--token-file", str(token_file)), web(extra_env={"SMQSUP_WEB_TOKEN": TOKEN})):
        assert server.request("GET", "/api/status")[0] == 401
        assert server.request("GET", "/api/status", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200
        assert TOKEN not in _title(server) and "visible to other users" not in server.log()


def test_an_unreadable_or_empty_token_file_exits_2_naming_it(tmp_path: Path) -> None:
    """--token-file that is missing, empty or not text: exit 2, one 'Error:' line naming the file."""
    empty, binary = tmp_path / "empty", tmp_path / "binary"
    empty.write_text("\n  \n")
    binary.write_bytes(b"\xff\xfe\n")
    for path, problem in ((tmp_path / "missing", "cannot read it"), (empty, "empty"), (binary, "not UTF-8")):
        result = procs.run("web", "--url", "redis://127.0.0.1:1", "--listen", "127.0.0.1:0",
                           "--token-file", str(path))
        lines = result.stderr.splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert lines[0].startswith("Error: smqsup web: --token-file") and str(path) in lines[0], lines[0]
        assert problem in lines[0], lines[0]


# --- pausing and the message browser ---------------------------------------------------


def test_pause_and_resume_through_the_api_set_and_clear_the_flag_consumers_obey(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis,
        web: WebFactory) -> None:
    """POST pause sets the Redis flag (by web@address), consumers take nothing; resume clears it and they go on."""
    supervise({"orders": {"handler": "tests.support.handlers:record"}})
    server = web("--token", TOKEN)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    k = QueueKeys("smq", "orders")
    flag = k.paused
    with Producer(redis_url) as p:
        p.publish("orders", "before")
    wait_for(lambda: server.json("/api/status", **bearer)["queues"]["orders"]["counters"]["acked"] == 1, 30)
    assert server.request("POST", "/api/queues/orders/pause", {}, origin=True)[0] == 401
    assert server.request("POST", "/api/queues/orders/pause", {}, bearer)[0] == 403  # no Origin

    status, _, body = server.request("POST", "/api/queues/orders/pause", {}, bearer, origin=True)
    assert status == 200 and json.loads(body) == {"queue": "orders", "paused": True, "changed": True}
    info = json.loads(redis_client.get(flag))
    assert info["by"] == "web@127.0.0.1" and info["at_ms"] > 0
    again = json.loads(server.request("POST", "/api/queues/orders/pause", {}, bearer, origin=True)[2])
    assert again == {"queue": "orders", "paused": True, "changed": False}
    snap = server.json("/api/status", **bearer)
    assert snap["queues"]["orders"]["paused"] is True
    samples = _samples(server.request("GET", "/metrics", headers=bearer)[2].decode())
    assert samples[("smqsup_queue_paused", frozenset({("queue", "orders")}))] == 1
    with Producer(redis_url) as p:
        p.publish("orders", "while paused")
    holds(lambda: redis_client.hget(k.counters, "acked") == b"1", 2.0, message="a paused queue's message was handled")
    wait_for(lambda: redis_client.llen(k.pending) == 1, 10)  # a consumer that took it gave it back

    status, _, body = server.request("POST", "/api/queues/orders/resume", None,  # an empty body does too
                                     {**bearer, "Content-Type": "application/json"}, origin=True)
    assert status == 200 and json.loads(body) == {"queue": "orders", "paused": False, "changed": True}
    assert redis_client.exists(flag) == 0
    wait_for(lambda: server.json("/api/status", **bearer)["queues"]["orders"]["counters"]["acked"] == 2, 30)
    samples = _samples(server.request("GET", "/metrics", headers=bearer)[2].decode())
    assert samples[("smqsup_queue_paused", frozenset({("queue", "orders")}))] == 0


def test_messages_lists_each_state_and_remove_deletes_waiting_ones(
        redis_url: str, redis_client: redis.Redis, web: WebFactory) -> None:
    """GET messages lists every state with its own fields; POST remove deletes waiting ones by id, freeing dedup keys."""
    with Producer(redis_url) as p:
        plain = p.publish("jobs", {"n": 1})
        urgent = p.publish("jobs", {"n": 2}, priority=7)
        later = p.publish("jobs", "<b>later</b>", delay=3600, dedup_key="once")
        held = p.publish("jobs", {"n": 3})
    broker = Broker(redis_url)
    try:
        broker.registry.register_consumer("jobs", "c1", ConsumerInfo(pid=1, host="h"))
        frame, _ = broker.messages.fetch("jobs", "c1", 1)  # takes the oldest pending: plain
        assert frame is not None
    finally:
        broker.close()
    redis_client.lpush(QueueKeys("smq", "jobs").dead, b'{"reason":"handler failed","at_ms":1000}\n' + frame)
    server = web()

    pending = server.json("/api/queues/jobs/messages")
    assert pending["state"] == "pending" and pending["total"] == 2
    assert [m["id"] for m in pending["messages"]] == [urgent, held]
    assert pending["messages"][0]["priority"] == 7 and pending["messages"][0]["preview"] == '{"n":2}'
    scheduled = server.json("/api/queues/jobs/messages?state=scheduled&limit=10")
    [row] = scheduled["messages"]
    assert row["id"] == later and row["retry"] is False and row["preview"] == "<b>later</b>"
    assert row["due_at"] - row["created_at"] == pytest.approx(3600, abs=5) and scheduled["total"] == 1
    [busy] = server.json("/api/queues/jobs/messages?state=processing")["messages"]
    assert busy["id"] == plain and busy["consumer"] == "c1"
    [dead] = server.json("/api/queues/jobs/messages?state=dead")["messages"]
    assert dead["id"] == plain and dead["reason"] == "handler failed"

    status, _, body = server.request("POST", "/api/queues/jobs/remove", {"ids": [later, plain, "no-such-id"]},
                                     origin=True)
    assert status == 200, body
    assert json.loads(body) == {"queue": "jobs", "removed": 1, "ids": {later: True, plain: False,
                                                                        "no-such-id": False}}
    assert server.json("/api/queues/jobs/messages?state=scheduled") == {"queue": "jobs", "state": "scheduled",
                                                                        "total": 0, "messages": []}
    assert redis_client.exists(QueueKeys("smq", "jobs").dedup("once")) == 0
    assert server.json("/api/status")["queues"]["jobs"]["counters"]["removed"] == 1
    assert "web removed 1 of 3 message(s)" in server.log()


def test_metrics_show_scheduled_and_the_new_events(redis_url: str, web: WebFactory) -> None:
    """/metrics: state="scheduled", and deduplicated among the events, whose HELP names every event."""
    with Producer(redis_url) as p:
        p.publish("later", 1, delay=600, dedup_key="k")
        p.publish("later", 2, dedup_key="k")
    server = web()
    text = server.request("GET", "/metrics")[2].decode()
    samples = _samples(text)
    assert samples[("smqsup_queue_messages", frozenset({("queue", "later"), ("state", "scheduled")}))] == 1
    assert samples[("smqsup_queue_messages", frozenset({("queue", "later"), ("state", "pending")}))] == 0
    assert samples[("smqsup_messages_total", frozenset({("queue", "later"), ("event", "deduplicated")}))] == 1
    for event in ("expired", "removed"):
        assert samples[("smqsup_messages_total", frozenset({("queue", "later"), ("event", event)}))] == 0
    [help_line] = [ln for ln in text.splitlines() if ln.startswith("# HELP smqsup_messages_total ")]
    assert all(event in help_line for event in ("expired", "deduplicated", "removed"))
    assert samples[("smqsup_queue_paused", frozenset({("queue", "later")}))] == 0


def test_api_status_and_metrics_show_messages_in_flight_per_consumer_and_per_queue(
        redis_url: str, web: WebFactory) -> None:
    """/api/status and /metrics: each consumer's messages in flight and concurrency, each queue's sums."""
    broker = Broker(redis_url)
    try:
        broker.registry.register_consumer("orders", "c1", ConsumerInfo(pid=11, host="h", index=1, busy=True, in_flight=37,
                                                                       concurrency=50))
        broker.registry.register_consumer("orders", "c2", ConsumerInfo(pid=12, host="h", index=2, in_flight=3, concurrency=50))
        broker.registry.register_consumer("orders", "old", ConsumerInfo(pid=13, host="h", index=3))  # written before in_flight
    finally:
        broker.close()
    server = web()
    orders = server.json("/api/status")["queues"]["orders"]
    assert {c["id"]: (c["in_flight"], c["concurrency"]) for c in orders["consumers"]} == {
        "c1": (37, 50), "c2": (3, 50), "old": (None, None)}
    assert (orders["in_flight"], orders["concurrency"]) == (40, 100)

    samples = _samples(server.request("GET", "/metrics")[2].decode())
    queue = frozenset({("queue", "orders")})
    assert samples[("smqsup_queue_in_flight", queue)] == 40 and samples[("smqsup_queue_concurrency", queue)] == 100
    c1 = frozenset({("queue", "orders"), ("consumer", "c1"), ("host", "h"), ("pid", "11")})
    assert samples[("smqsup_consumer_in_flight", c1)] == 37 and samples[("smqsup_consumer_concurrency", c1)] == 50
    assert samples[("smqsup_consumer_busy", c1)] == 1
    per_consumer = {dict(labels)["consumer"] for (name, labels) in samples if name == "smqsup_consumer_in_flight"}
    assert per_consumer == {"c1", "c2"}  # the entry without the figure has no sample


def test_cancel_answers_each_id_and_processing_rows_show_progress(
        redis_url: str, redis_client: redis.Redis, web: WebFactory) -> None:
    """POST cancel: a scheduled message cancelled, a held one stopping, an unknown id unknown; a held tracked
    message's row carries the progress its handler reported; junk in the tracking hash shows none."""
    jobs = QueueKeys("smq", "jobs")
    with Producer(redis_url) as p:
        later = p.publish("jobs", "later", delay=3600)
        held = p.publish("jobs", {"n": 1}, result_ttl=60)
    broker = Broker(redis_url)
    try:
        broker.registry.register_consumer("jobs", "c1", ConsumerInfo(pid=1, host="h"))
        assert broker.messages.fetch("jobs", "c1", 1)[0] is not None
        assert broker.tracking.progress("jobs", held, '{"rows":12,"of":50}')
    finally:
        broker.close()
    server = web()
    [row] = server.json("/api/queues/jobs/messages?state=processing")["messages"]
    assert row["id"] == held and row["progress"] == {"rows": 12, "of": 50}
    status, _, body = server.request("POST", "/api/queues/jobs/cancel", {"ids": [later, held, "no-such-id"]},
                                     origin=True)
    assert status == 200, body
    assert json.loads(body) == {"queue": "jobs", "cancelled": 2,
                                "ids": {later: "cancelled", held: "stopping", "no-such-id": "unknown"}}
    assert "web cancelled 2 of 3 message(s)" in server.log()
    assert redis_client.zscore(jobs.cancel, held) is not None
    redis_client.delete(jobs.tracked)
    redis_client.set(jobs.tracked, "junk")
    [row] = server.json("/api/queues/jobs/messages?state=processing")["messages"]
    assert row["progress"] is None


def test_status_and_metrics_show_outbox_entries_set_aside_and_keys_of_the_wrong_type(
        redis_url: str, redis_client: redis.Redis, web: WebFactory) -> None:
    """Entries set aside (by the real park script) and a pending list of the wrong type: /api/status names
    them (the key, Redis's reason), /metrics counts them, and the other figures of the queue still read."""
    from smqsup.keys import queues_set
    from smqsup.store import scripts
    a = QueueKeys("smq", "a")
    redis_client.sadd(queues_set("smq"), "a")
    reason = "WRONGTYPE smq:{b}:blocked holds a string, not a hash: nothing done"
    entries = [f"o\tb\tc{i}\tpid\tdone\tnull".encode() for i in range(3)]
    scripts.outbox_park(a, [("o\tb", reason, "c2", entries)], base_ms=1000, most_ms=30000, park_after=5).run(
        redis_client)
    redis_client.set(a.pending, "junk")
    redis_client.zadd(a.scheduled, {b"x": 1})
    server = web()
    snap = server.json("/api/status")["queues"]["a"]
    assert snap["wrong_type_keys"] == [f"{a.pending} holds a string, not a list"]
    assert snap["sizes"]["scheduled"] == 1 and snap["outbox_parked_records"] == 1
    [row] = snap["outbox_parked"]
    assert {k: row[k] for k in ("kind", "target_queue", "target_id", "entries", "failures", "parked", "key")} == {
        "kind": "child", "target_queue": "b", "target_id": "c2", "entries": 3, "failures": 1, "parked": False,
        "key": "smq:{b}:blocked"}
    samples = _samples(server.request("GET", "/metrics")[2].decode())
    assert samples[("smqsup_outbox_parked_entries", frozenset({("queue", "a")}))] == 3
    assert samples[("smqsup_wrong_type_keys", frozenset({("queue", "a")}))] == 1
