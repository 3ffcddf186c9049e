"""Hostile input against the real ``smqsup web``: no request and no bytes
already in Redis get a 5xx, invalid JSON, a traceback or a secret out of it."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import random
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, Optional
from urllib.parse import quote

import aiohttp
import pytest
import redis
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from smqsup import safe
from smqsup.collector import stats
from smqsup.store.broker import Broker
from smqsup.views import browse
from smqsup.web import metrics
from smqsup.web.server import build_app
from smqsup.web.source import Source
from tests.support.shared_web import SharedWeb, shared_web_fixture, shared_web_servers  # noqa: F401 (fixtures used here)
from tests.support.webserver import WebServer

TOKEN = "hostile-test-token"
PASSWORD = "hostile-redis-pass"

#: A dead letter whose frame holds a bare NaN (Python's json reads it, strict JSON has no NaN).
NAN_DEAD_LETTER = b'{"reason":"x","at_ms":1}\n0|{"id":"a","queue":"q","body":NaN,"created_at":1,"headers":{}}'
DEEP = b"[" * 100_000 + b"]" * 100_000
#: Nested just shallow enough for json.loads in a fresh thread, too deep to encode from a busy stack.
FAIRLY_DEEP = b"[" * 900 + b"]" * 900

WebFactory = Callable[..., WebServer]


def _refuse(name: str) -> NoReturn:
    raise ValueError(f"{name} is not strict JSON")


def strict_json(body: bytes) -> Any:
    """``body`` decoded as strict JSON: UTF-8, and no NaN or Infinity."""
    return json.loads(body.decode("utf-8"), parse_constant=_refuse)


def seed_hostile(client: redis.Redis, queue: str = "q") -> None:
    """Write unreadable or absurd values into every key the web server reads for ``queue``."""
    k = f"smq:{{{queue}}}"
    client.sadd("smq:queues", queue, b"\xff\xfe", "a:b", ".", "..", "x" * 300)
    client.lpush(f"{k}:dead", NAN_DEAD_LETTER, b"\xff\xfe", DEEP, b'{"reason":"x"}\n' + DEEP,
                 b'{"at_ms":' + b"9" * 400 + b'}\n0|{}', b'{"reason":"x","at_ms":1e999,"error_type":[1]}\n\xff|x',
                 b'{"reason":"x","at_ms":1}\n0|{"id":"d","queue":"q","body":' + FAIRLY_DEEP +
                 b',"created_at":1,"headers":{}}', b'{"reason":"x"}\n0|{"id":"s","queue":"q","body":"\\udcff",'
                 b'"created_at":1e999,"headers":{}}')
    client.hset(f"{k}:consumers", mapping={
        "c1": b"not json", "c2": b"[1, 2]", "c3": DEEP, "c4": b"\xff\xfe",
        "c5": b'{"pid": "x", "index": "y", "cpu": NaN, "rss": ' + b"9" * 400 + b', "host": {"a": 1}, '
              b'"in_flight": -3, "concurrency": "50"}',
        "c6": b'{"id": [1], "pid": 1e999, "index": -Infinity, "uss": "\\udcff", "received": ' + FAIRLY_DEEP +
              b', "in_flight": NaN, "concurrency": ' + b"9" * 400 + b'}',
        "c7": b'{"in_flight": 1001, "concurrency": 0}',
        b"\xff": b"{}"})
    client.zadd(f"{k}:heartbeats", {"c5": float("inf"), "c6": 1})
    client.hset(f"{k}:slots", mapping={"h:#1": b"{}", "h:#2": b"nope", "h:#3": b'{"restarts": "many"}',
                                       "h:#4": b'{"restarts": ' + b"9" * 400 + b"}"})
    client.hset(f"{k}:counters", mapping={"published": b"abc", "acked": b"1.5", "retried": b"9" * 5000,
                                          "dead_lettered": b"\xff", "reclaimed": b"-"})
    client.hset(f"{k}:gc", mapping={"reclaimed": b"x", b"\xff": b"1", "orphans": b"9" * 5000})
    client.lpush(f"{k}:series", b"garbage", b"[]", b'{"t":"x"}', b'{"t":1,"published":"y"}', b'{"t":NaN}', DEEP,
                 b'{"t":2,"published":1e999}', b'{"t":3,"published":' + b"9" * 400 + b"}", b'{"t":4,"acked":5}')
    client.hset("smq:{smq}:producers", mapping={"p1": b"garbage", "p2": b'{"published":"x","id":[1]}',
                                            b"\xff": b'{"published":NaN,"seen_at_ms":1e999}', "p3": DEEP})
    client.set(f"{k}:gc:lock", b"\xff\xfe leader")
    nan_frame = b'1|{"id":"n","queue":"q","body":NaN,"created_at":1e999,"headers":{}}'
    client.rpush(f"{k}:pending", b"garbage", b"\xff\xfe", DEEP, nan_frame, b"9:9:" + b"9" * 400 + b"|{}")
    client.zadd(f"{k}:priority", {b"\xff": 1, DEEP: 2, b"3:7:0|" + FAIRLY_DEEP: -1})
    client.zadd(f"{k}:scheduled", {b"\xff": float("inf"), nan_frame: float("-inf"), b"1|{}": 1e300})
    client.zadd(f"{k}:delayed", {b"x|" + DEEP: 5, b"": 1})
    client.rpush(f"{k}:processing:c1", b"\xff", DEEP, nan_frame)
    for fields in ({"event": "progress", "id": b"\xff\xfe", "attempts": "0", "data": b'{"v": NaN, "w": "\\udcff"}'},
                   {"event": "dead", "id": "d", "attempts": "9" * 400, "data": DEEP}, {b"\xff": DEEP},
                   {"event": "done", "id": "x", "attempts": "1", "data": FAIRLY_DEEP}):
        client.xadd(f"{k}:events", fields)


@pytest.fixture
def web(tmp_path: Path, redis_url: str) -> Iterator[WebFactory]:
    """Start ``smqsup web --url URL --listen 127.0.0.1:0 [ARGS]`` (URL: the private
    Redis unless given); each logs to its own file and is stopped at teardown."""
    started: list[WebServer] = []

    def _start(*args: str, url: str = redis_url) -> WebServer:
        log_dir = tmp_path / f"web{len(started)}"
        log_dir.mkdir()
        server = WebServer("--url", url, "--listen", "127.0.0.1:0", *args, log_dir=log_dir)
        started.append(server)
        return server

    yield _start
    for server in started:
        assert server.stop() == 0, server.log()


def raw_request(address: str, data: bytes, timeout_s: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send ``data`` as is on a new connection; (status, lowercased headers, body).
    A 101 (WebSocket accepted) is returned without reading the stream."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(data)
        resp = http.client.HTTPResponse(sock, method="HEAD" if data.startswith(b"HEAD ") else "GET")
        resp.begin()
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return resp.status, headers, b"" if resp.status == 101 else resp.read()


def request_bytes(method: str, target: str, address: str, headers: Optional[dict[str, bytes]] = None,
                  body: bytes = b"") -> bytes:
    """An HTTP/1.1 request with ``Connection: close``, as bytes (any bytes may go in)."""
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: " + address.encode(), b"Connection: close"]
    lines += [name.encode() + b": " + value for name, value in (headers or {}).items()]
    if body or method in ("POST", "PUT"):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def check_reply(status: int, headers: dict[str, str], body: bytes, where: str, sent: bytes = b"") -> None:
    """The rule: below 500; JSON replies strict, errors as {"error": "..."}; no traceback, and
    no secret that the request itself did not carry (a 400 may quote the request line)."""
    assert status < 500, f"{where}: {status} {body[:300]!r}"
    for secret in (TOKEN.encode(), PASSWORD.encode()):
        assert secret not in body or secret in sent, f"{where}: {secret!r} in the reply"
    assert b"Traceback" not in body, where
    if headers.get("content-type", "").startswith("application/json") and body:
        data = strict_json(body)
        if status >= 400:
            assert isinstance(data, dict) and isinstance(data.get("error"), str), f"{where}: {body[:300]!r}"


def check_log(server: WebServer, secrets: tuple[str, ...] = (TOKEN, PASSWORD)) -> None:
    """The server's log holds no traceback and none of the server's ``secrets``."""
    text = server.log()
    assert "Traceback" not in text, text[-3000:]
    for secret in secrets:
        assert secret not in text, f"{secret!r} in the log: {text[-3000:]}"


# --- the reproduced bugs, one at a time ------------------------------------------------


def test_a_dead_letter_holding_nan_is_listed_as_strict_json(shared_web: SharedWeb) -> None:
    """GET /api/queues/q/dead over a frame with a bare NaN answers strict JSON listing it."""
    shared_web.client.lpush("smq:{q}:dead", NAN_DEAD_LETTER)
    server = shared_web.server
    status, headers, body = server.request("GET", "/api/queues/q/dead")
    assert status == 200 and headers["content-type"].startswith("application/json")
    listing = strict_json(body)
    assert listing["total"] == 1 and len(listing["entries"]) == 1


@pytest.mark.parametrize("token", [None, TOKEN])
def test_undecodable_headers_and_odd_arguments_get_a_json_4xx(web: WebFactory, shared_web: SharedWeb,
                                                              token: Optional[str]) -> None:
    """Raw 0xff in Authorization or Cookie, "²" or 5,000 digits, deep or non-UTF-8 bodies: a JSON 4xx, no traceback."""
    server = web("--token", token) if token else shared_web.server
    port = server.address.rsplit(":", 1)[1]
    auth = {"Authorization": b"Bearer " + token.encode()} if token else {}
    origin = {"Origin": f"http://{server.address}".encode()}
    json_type = {"Content-Type": b"application/json"}
    cases: list[tuple[str, str, dict[str, bytes], bytes, set[int]]] = [
        ("GET", "/api/status", {"Authorization": b"Bearer \xff"}, b"", {401} if token else {200}),
        ("GET", "/api/status", {"Cookie": b"\xff"}, b"", {401} if token else {200}),
        ("GET", "/api/status", {"Cookie": f"smqsup_session_{port}=".encode() + b"\xff"}, b"",
         {401} if token else {200}),
        ("GET", "/api/queues/q/dead?limit=%C2%B2", auth, b"", {400}),
        ("GET", "/api/queues/q/history?seconds=" + "9" * 5000, auth, b"", {400}),
        ("POST", "/api/queues/q/dead/purge", {**auth, **origin, **json_type}, DEEP, {400}),
        ("POST", "/api/queues/q/dead/purge", {**auth, **origin, **json_type}, b'{"ids": ["\xff"]}', {400}),
        ("POST", "/api/queues/q/dead/purge", {**auth, **origin, "Content-Type": b"application/json; charset=bogus"},
         b'{"ids": ["x"]}', {200}),
        ("POST", "/api/queues/q/dead/purge", {**auth, **origin, **json_type}, b'{"ids": [NaN]}', {400}),
        ("GET", "/api/no/such/thing", auth, b"", {404}),
        ("DELETE", "/api/status", {**auth, **origin}, b"", {405}),
    ]
    for method, target, headers, body, expected in cases:
        status, reply_headers, reply = raw_request(server.address, request_bytes(method, target, server.address,
                                                                                  headers, body))
        where = f"{method} {target[:60]} {headers}"
        check_reply(status, reply_headers, reply, where)
        assert status in expected, f"{where}: {status} {reply[:200]!r}"
        if status != 200:
            assert reply_headers["content-type"].startswith("application/json"), where
    malformed = b"GET /?token=" + TOKEN.encode() + b" HTTP/9.9\r\n\r\n"  # refused by aiohttp's parser
    assert raw_request(server.address, malformed)[0] == 400
    check_log(server, (token,) if token else ())


class _Broken(Source):
    """A Source whose snapshot fails the way an unknown bug would, a secret in its text."""

    def snapshot(self) -> dict[str, Any]:
        raise RuntimeError(f"unforeseen, with {PASSWORD} in it\nand a second line")


def test_an_unexpected_error_is_a_json_500_and_one_scrubbed_log_line(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A failure nothing else handles: 500 {"error": "internal error"}, one log line, no traceback, no secret."""
    safe.register_secret(PASSWORD)
    source = _Broken(Broker(redis_url, client_name="smqsup-test"), ["q"])

    async def get() -> tuple[int, bytes]:
        async with TestClient(TestServer(build_app(source, None))) as client:
            resp = await client.get("/api/status")
            return resp.status, await resp.read()

    try:
        with caplog.at_level(logging.INFO):
            status, body = asyncio.run(get())
    finally:
        source.close()
    assert status == 500 and strict_json(body) == {"error": "internal error"}
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    line = errors[0].getMessage()
    assert errors[0].exc_info is None and "\n" not in line and PASSWORD not in line
    assert "RuntimeError at test_web_hostile.py:" in line and "second line" in line


async def _first_messages(url: str, count: int, **headers: str) -> list[str]:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"{url}/ws", origin=url, headers=headers) as ws:
            return [await ws.receive_str(timeout=10) for _ in range(count)]


def test_hostile_bytes_in_redis_still_give_200_and_valid_output(shared_web: SharedWeb) -> None:
    """Over garbage in every key it reads, each endpoint and the WebSocket answer 200 with strict JSON or metrics."""
    seed_hostile(shared_web.client)
    server = shared_web.server
    for path in ("/api/status", "/api/queues/q/history", "/api/queues/q/dead?limit=1000",
                 *(f"/api/queues/q/messages?state={state}&limit=1000" for state in browse.STATES)):
        status, _, body = server.request("GET", path)
        assert status == 200, (path, body[:300])
        strict_json(body)
    listing = strict_json(server.request("GET", "/api/queues/q/dead")[2])
    assert listing["total"] == len(listing["entries"]) == 8
    counts = {state: len(strict_json(server.request("GET", f"/api/queues/q/messages?state={state}")[2])["messages"])
              for state in browse.STATES}
    assert counts == {"pending": 8, "scheduled": 5, "processing": 3, "dead": 8}
    garbage = browse.ref(b"\xff\xfe")
    status, _, reply = server.request("POST", "/api/queues/q/remove", {"ids": [garbage]}, origin=True)
    assert status == 200 and strict_json(reply)["ids"] == {garbage: True}, reply
    status, _, body = server.request("GET", "/metrics")
    assert status == 200, body[:300]
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert "smqsup_queue_messages" in families and not families["smqsup_consumer_in_flight"].samples
    assert [(s.labels, s.value) for s in families["smqsup_queue_in_flight"].samples] == [({"queue": "q"}, 0)]
    history, snapshot = [strict_json(m.encode()) for m in asyncio.run(_first_messages(server.url, 2))]
    assert history["type"] == "history" and [p["t"] for p in history["queues"]["q"]] == [1, 2, 3, 4]
    assert snapshot["type"] == "snapshot" and snapshot["snapshot"]["queues"]["q"]["sizes"]["dead"] == 8
    check_log(server)


def test_snapshot_blanks_what_it_cannot_read(redis_client: redis.Redis, redis_url: str) -> None:
    """stats.snapshot over garbage: bad counters read 0, bad numbers None, nested values dropped, bad points skipped."""
    seed_hostile(redis_client)
    broker = Broker(redis_url)
    try:
        snap = stats.snapshot(broker, ["q"])
        points = stats.history(broker, "q")
    finally:
        broker.close()
    q = snap["queues"]["q"]
    assert q["counters"] == {c: 0 for c in stats.COUNTERS} and q["sizes"]["dead"] == 8
    rows = {r["id"]: r for r in q["consumers"]}
    assert set(rows) == {"c1", "c2", "c3", "c4", "c5", "c6", "c7", "\ufffd"}
    assert rows["c5"]["pid"] is rows["c5"]["cpu"] is rows["c5"]["rss"] is rows["c5"]["host"] is None
    assert rows["c5"]["heartbeat_age_s"] is None and rows["c6"]["heartbeat_age_s"] > 0  # beats at +inf and at 1 ms
    assert rows["c6"]["pid"] is rows["c6"]["index"] is rows["c6"]["uss"] is rows["c6"]["received"] is None
    assert all(r["in_flight"] is r["concurrency"] is None for r in rows.values())
    assert (q["in_flight"], q["concurrency"], snap["totals"]["in_flight"], snap["totals"]["concurrency"]) == (0, 0, 0, 0)
    assert q["leader"] == "\ufffd\ufffd leader" and q["gc"] == {"\ufffd": 1}
    assert q["slots"] == {"h:#1": {}, "h:#2": {}, "h:#3": {"restarts": None}, "h:#4": {"restarts": None}}
    assert {p["id"]: p.get("published") for p in snap["producers"]} == {"p1": None, "p2": None, "p3": None,
                                                                         "\ufffd": None}
    assert points == [{"t": 1}, {"t": 2}, {"t": 3}, {"t": 4, "acked": 5}]


def test_metrics_render_garbage_in_flight_figures_as_a_valid_exposition() -> None:
    """In-flight figures that are text, booleans, NaN, negative, past the float range or missing: a valid
    exposition with a sample for each number and none for the rest."""
    garbage: list[Any] = ["37", True, float("nan"), -1, 10**400, None, [1], {"a": 1}]
    consumers = [{"id": f"c{i}", "host": "h\n\"", "pid": i, "in_flight": v, "concurrency": v}
                 for i, v in enumerate(garbage)] + [{"id": "bare"}]
    snap = {"t": 0, "producers": [], "queues": {
        name: {"sizes": dict.fromkeys(stats.SIZES, 0), "counters": dict.fromkeys(stats.COUNTERS, 0),
               "consumers": consumers if name == "q" else [], "leader": None, "slots": {}, **extra}
        for name, extra in (("q", {"in_flight": "x", "concurrency": float("inf")}), ("r", {}))}}
    families = {f.name: f for f in text_string_to_metric_families(metrics.render(snap))}
    in_flight = {s.labels["consumer"]: s.value for s in families["smqsup_consumer_in_flight"].samples}
    assert set(in_flight) == {"c2", "c3"} and in_flight["c3"] == -1  # NaN and -1 are numbers; Prometheus takes both
    assert [s.value for s in families["smqsup_queue_concurrency"].samples] == [float("inf")]
    assert not families["smqsup_queue_in_flight"].samples


def test_dot_and_dotdot_queue_names_in_the_path_get_a_4xx(shared_web: SharedWeb) -> None:
    """'.' and '..' as the queue in the path, plain or %-encoded: a 4xx JSON error, never a listing."""
    server = shared_web.server
    origin = {"Origin": f"http://{server.address}".encode(), "Content-Type": b"application/json"}
    for method, target in (("GET", "/api/queues/./dead"), ("GET", "/api/queues/%2e%2e/dead"),
                           ("GET", "/api/queues/%2E/history"), ("GET", "/api/queues/../dead"),
                           ("POST", "/api/queues/%2e/dead/purge"), ("POST", "/api/queues/%2e%2e/dead/requeue")):
        headers = origin if method == "POST" else {}
        body = b'{"ids": ["x"]}' if method == "POST" else b""
        status, reply_headers, reply = raw_request(server.address, request_bytes(method, target, server.address,
                                                                                  headers, body))
        check_reply(status, reply_headers, reply, target)
        assert 400 <= status < 500 and reply_headers["content-type"].startswith("application/json"), target


@pytest.mark.parametrize("path, name", [("/api/queues/q/history", "seconds"), ("/api/queues/q/dead", "limit"),
                                        ("/api/queues/q/messages", "limit")])
def test_hostile_query_numbers_get_a_400_naming_the_argument(shared_web: SharedWeb, path: str, name: str) -> None:
    """seconds / limit negative, zero, NaN, empty, huge, non-UTF-8, a lone surrogate or very long: 400, one line."""
    server = shared_web.server
    for value in ("-1", "0", "NaN", "nan", "inf", "", "1e3", "0x10", "+5", "%EF%BC%91", "9" * 5000, "%ff",
                  "%ED%A0%80", "%00", "1%0a2", "x" * 8000, "99999999999999999999999", "1" + "0" * 400):
        target = f"{path}?{name}={value}"
        status, headers, reply = raw_request(server.address, request_bytes("GET", target, server.address))
        check_reply(status, headers, reply, target[:80])
        assert status == 400 and headers["content-type"].startswith("application/json"), (target[:80], status)
        problem = strict_json(reply)["error"]
        assert problem.startswith(f"{name}: expected an integer from 1 to ") and problem.isprintable(), problem
        assert len(problem) < 200, problem
    # Past aiohttp's longest request line the parser refuses it before any handler: still a 400.
    status, _, _ = raw_request(server.address, request_bytes("GET", f"{path}?{name}={'9' * 20_000}", server.address))
    assert status == 400
    check_log(server, ())


def _refusal(server: WebServer, method: str, target: str, body: bytes = b"",
             content_type: bytes = b"application/json") -> tuple[int, str]:
    """Send one request with the server's own Origin; check the reply is a one-line JSON
    error and return (status, error text)."""
    headers = {"Origin": f"http://{server.address}".encode(), "Content-Type": content_type}
    status, reply_headers, reply = raw_request(server.address, request_bytes(method, target, server.address,
                                                                              headers, body))
    where = f"{method} {target[:80]} {body[:80]!r}"
    check_reply(status, reply_headers, reply, where)
    assert 400 <= status < 500 and reply_headers["content-type"].startswith("application/json"), (where, status)
    problem = strict_json(reply)["error"]
    assert problem.isprintable() and len(problem) < 300, (where, problem)
    return status, problem


#: Queue names for the path that are no queue name: braces, colons, dots, undecodable, too long.
_BAD_QUEUES = ("a%7Bb%7D", "%7Bq%7D", "a:b", "%2e", "%2e%2e", "%ff", "%ED%A0%80", "%00", "a%20b", "x" * 300)


def test_hostile_message_browser_and_pause_arguments_get_a_4xx_naming_them(shared_web: SharedWeb) -> None:
    """state, limit, ids, the queue in the path, the body and the method of the new endpoints: a JSON 4xx naming it."""
    redis_client = shared_web.client
    redis_client.sadd("smq:queues", "q")
    server = shared_web.server
    for state in ("bogus", "", "PENDING", "dead%00", "%ff", "%ED%A0%80", "pending%20", "x" * 8000):
        status, problem = _refusal(server, "GET", f"/api/queues/q/messages?state={state}")
        assert status == 400 and problem.startswith("state: expected one of pending, scheduled, processing, dead"), \
            problem
    for method, path, body in (("GET", "messages", b""), ("POST", "remove", b'{"ids": ["x"]}'),
                               ("POST", "cancel", b'{"ids": ["x"]}'), ("POST", "pause", b"{}"),
                               ("POST", "resume", b"{}")):
        status, problem = _refusal(server, method, f"/api/queues/nosuch/{path}", body)
        assert status == 404 and problem.startswith("queue: no queue named 'nosuch'"), problem
        for name in _BAD_QUEUES:
            status, problem = _refusal(server, method, f"/api/queues/{name}/{path}", body)
            assert status == 400 and problem.startswith("queue: a name "), (name, problem)
    lone = b'{"ids": ["\\udcff"]}'
    for body in (b'{"ids": []}', b'{"ids": "x"}', b'{"ids": [1]}', b'{"ids": [null]}', b'{"ids": ["a b"]}',
                 b'{"ids": ["' + b"x" * 129 + b'"]}', lone, b'{"ids": ["\\u0000"]}', b'{"all": true}', b"{}",
                 b'{"ids": [' + b'"x",' * 9_999 + b'"y"]}', b'{"ids": {"a": 1}}'):
        for path in ("remove", "cancel"):
            status, problem = _refusal(server, "POST", f"/api/queues/q/{path}", body)
            assert status == 400 and problem.startswith("ids: expected "), (path, body[:60], problem)
    for body, content_type, expected in (
            (b"", b"application/json", "the body is not valid JSON"), (b"[]", b"application/json", "expected a JSON "
            "object"), (b'{"ids": [NaN]}', b"application/json", "the body is not valid JSON"),
            (b'{"ids": ["\xff"]}', b"application/json", "the body is not valid JSON"),
            (DEEP, b"application/json", "the body is not valid JSON"),
            (b'{"ids": ["x"]}', b"text/plain", "expected a JSON body")):
        status, problem = _refusal(server, "POST", "/api/queues/q/remove", body, content_type)
        assert status == 400 and problem.startswith(expected), (body[:60], problem)
    for path in ("pause", "resume"):
        assert _refusal(server, "POST", f"/api/queues/q/{path}", b'{"by": "me"}')[1].startswith("body: ")
        assert _refusal(server, "POST", f"/api/queues/q/{path}", b"", b"text/plain")[1].startswith("expected a JSON")
    huge = b'{"ids": ["' + b"x" * (2 << 20) + b'"]}'
    for path in ("remove", "cancel", "pause"):
        assert _refusal(server, "POST", f"/api/queues/q/{path}", huge) == (
            413, "body: larger than the 1024 KiB a request may carry")
    for method, path in (("GET", "pause"), ("GET", "resume"), ("GET", "remove"), ("POST", "messages"),
                         ("PUT", "pause"), ("DELETE", "remove"), ("PATCH", "messages")):
        status, problem = _refusal(server, method, f"/api/queues/q/{path}", b"{}")
        assert status == 405 and problem.startswith(f"method: {method} is not allowed here (allowed: "), problem
    assert redis_client.exists("smq:{q}:paused") == 0
    check_log(server, ())


def test_the_new_endpoints_need_the_token_when_listening_beyond_loopback(
        redis_client: redis.Redis, web: WebFactory) -> None:
    """Listening on 0.0.0.0 with a token: messages, remove, pause, resume refuse a missing or wrong token (401)
    and a POST without Origin (403); with both, pause works."""
    redis_client.sadd("smq:queues", "q")
    server = web("--token", TOKEN, "--listen", "0.0.0.0:0")
    assert server.address.startswith("0.0.0.0:")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for method, path, body in (("GET", "messages?state=dead", None), ("POST", "remove", {"ids": ["x"]}),
                               ("POST", "cancel", {"ids": ["x"]}), ("POST", "pause", {}), ("POST", "resume", {})):
        target = f"/api/queues/q/{path}"
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer"}):
            status, reply_headers, reply = server.request(method, target, body, headers, origin=True)
            check_reply(status, reply_headers, reply, target)
            assert status == 401 and strict_json(reply)["error"].startswith("token required"), (target, headers)
        if method == "POST":
            assert server.request(method, target, body, bearer)[0] == 403, target
    assert server.request("POST", "/api/queues/q/pause", {}, bearer, origin=True)[0] == 200
    assert redis_client.exists("smq:{q}:paused") == 1
    check_log(server)


# --- fuzzing ---------------------------------------------------------------------------

#: Requests sent to each server, at most, and the time allowed for them in seconds.
FUZZ_REQUESTS = 3000
FUZZ_SECONDS = 20.0

_NAMES = ["q", ".", "..", "%2e", "%2E%2e", "é", "%C3%A9", "日本", "%ff", "%00", "a:b", "%7Bq%7D", "x" * 300, "",
          "%ED%A0%80", "%c0%ae", "q%2F..", "%", "%zz", "~", "q;x", "a b", "%0d%0aX:%20y"]
_VALUES = ["1", "0", "-1", "²", "9" * 5000, "1e3", "%ff", "１２", "", "NaN", "0x10", "+5", "1000", "1001", "%00",
           "900", TOKEN, "%ED%A0%80", "1" * 30, "pending", "scheduled", "processing", "dead", "bogus", "0=1-1",
           "0=0-0,1=5-5", "63=1-1", "0=18446744073709551615-18446744073709551615"]
_KEYS = ["limit", "seconds", "token", "x", "%ff", "", "limit", "state", "state", "after", "after"]
_PATHS = ["/", "/ws", "/api/status", "/metrics", "/static/app.js", "/static/{n}", "/api/queues/{n}/history",
          "/api/queues/{n}/dead", "/api/queues/{n}/dead/requeue", "/api/queues/{n}/dead/purge", "/api/queues/{n}",
          "/api/queues/{n}/dead/../../status", "//", "/%ff", "/api/../api/status", "*", "/favicon.ico",
          "/api/queues/{n}/messages", "/api/queues/{n}/remove", "/api/queues/{n}/pause", "/api/queues/{n}/resume",
          "/api/queues/{n}/cancel", "/api/queues/{n}/events"]
_METHODS = ["GET"] * 6 + ["POST"] * 4 + ["HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "FOO"]
_BODIES = [b"", b'{"ids": ["zz"]}', b'{"ids": []}', b'{"ids": "x"}', b'{"all": "yes"}', b"null", b"[]", b"NaN",
           b'{"ids": [NaN]}', DEEP, b"\xff\xfe", b'{"ids": ["\\udcff"]}', b'{"ids": ["\xff"]}', b"{" * 5000,
           b'{"ids": [' + b'"x",' * 10_001 + b'"y"]}', b'{"ids": [1e999]}', b'{"ids": ["a"], "all": true}', b"{}",
           b'{"ids": ["n", "raw-0123456789abcdef"]}']
_GARBAGE = [b"\xff\xfe\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"GET  HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost\r\n\r\n", b"GET / HTTP/1.1\r\nX: " + b"a" * 10_000 + b"\r\n\r\n",
            b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n", b"GET http://evil/api/status HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /api/queues/q/dead/purge HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
            b"GET /api/status HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"GET /%%%% HTTP/1.1\r\n\r\n"]


def _fuzz_headers(rng: random.Random, address: str) -> dict[str, bytes]:
    """Some of: bad Authorization, Cookie, Origin, Host, Content-Type, junk; a WebSocket upgrade;
    often the right token, Origin and Host, so that requests get past the access checks."""
    port = address.rsplit(":", 1)[1].encode()
    own = address.encode()
    choices: dict[str, list[bytes]] = {
        "Authorization": [b"Bearer \xff", b"Bearer", b"Basic Zm9vOmJhcg==", b"Bearer " + b"a" * 4000,
                          b"bearer  " + TOKEN.encode() + b" ", b"Bearer " + TOKEN.encode() + b"\xff"],
        "Cookie": [b"\xff", b"smqsup_session_" + port + b"=\xff", b"a=b; ;;=;", b'"', b"smqsup_session_" + port +
                   b"=" + b"0" * 64, b"=\xff\xfe"],
        "Origin": [b"null", b"http://[", b"http://evil.example", b"\xff", b"http://127.0.0.1:1", b""],
        "Host": [b"evil.example", b"[", b"", b"localhost:" + port, b"[::1]:" + port, b"\xff", own + b":1"],
        "Content-Type": [b"application/json; charset=bogus", b"application/json; charset=latin-1", b"text/plain",
                         b"multipart/form-data; boundary=x", b"\xff", b"application/json;;;"],
        "X-Junk": [b"\xff\xfe\x80", b"a" * 2000],
    }
    good = {"Authorization": b"Bearer " + TOKEN.encode(), "Origin": b"http://" + own,
            "Content-Type": b"application/json"}
    headers = {name: rng.choice(values) for name, values in choices.items() if rng.random() < 0.15}
    headers.setdefault("Host", own)  # HTTP/1.1 needs one
    for name, value in good.items():
        if name not in headers and rng.random() < 0.7:
            headers[name] = value
    if rng.random() < 0.05:
        headers.update({"Upgrade": b"websocket", "Connection": b"Upgrade", "Sec-WebSocket-Version": b"13",
                        "Sec-WebSocket-Key": b"dGhlIHNhbXBsZSBub25jZQ=="})
    return headers


def _url_part(rng: random.Random, text: str) -> str:
    """``text`` %-encoded as a client would (keeping its own %xx), or now and then raw."""
    return text if rng.random() < 0.2 else quote(text, safe="%:;{}~.")


def _fuzz_request(rng: random.Random, address: str) -> bytes:
    """One random request, adversarial in every part; now and then plain garbage."""
    if rng.random() < 0.05:
        return rng.choice(_GARBAGE)
    target = rng.choice(_PATHS).replace("{n}", _url_part(rng, rng.choice(_NAMES)))
    if rng.random() < 0.5:
        target += "?" + "&".join(f"{_url_part(rng, rng.choice(_KEYS))}={_url_part(rng, rng.choice(_VALUES))}"
                                 for _ in range(rng.randint(1, 3)))
    method = rng.choice(_METHODS)
    body = rng.choice(_BODIES) if method in ("POST", "PUT", "PATCH") or rng.random() < 0.05 else b""
    headers = _fuzz_headers(rng, address)
    lines = [f"{method} {target} HTTP/1.1".encode()]
    lines += [name.encode() + b": " + value for name, value in headers.items()]
    if "Connection" not in headers:
        lines.append(b"Connection: close")
    if body or method == "POST":
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _fuzz(server: WebServer, seed: int) -> dict[int, int]:
    """Send random requests until FUZZ_REQUESTS or FUZZ_SECONDS and check each reply;
    returns how many got each status (0: connection dropped)."""
    rng = random.Random(seed)
    deadline = time.monotonic() + FUZZ_SECONDS
    statuses: dict[int, int] = {}
    for n in range(FUZZ_REQUESTS):
        if time.monotonic() > deadline:
            break
        data = _fuzz_request(rng, server.address)
        where = f"seed={seed} request #{n}: {data[:300]!r}"
        try:
            status, headers, body = raw_request(server.address, data)
        except (http.client.RemoteDisconnected, ConnectionResetError):
            assert data in _GARBAGE, f"{where}: connection dropped"  # aiohttp may hang up on garbage
            status = 0
        else:
            check_reply(status, headers, body, where, data)
        statuses[status] = statuses.get(status, 0) + 1
        if n % 100 == 99:
            assert server.proc.poll() is None, f"{where}: the server exited: {server.log()[-2000:]}"
    return statuses


@pytest.mark.parametrize("token", [None, TOKEN])
def test_random_and_adversarial_requests_never_get_a_5xx(redis_client: redis.Redis, redis_url: str,
                                                          web: WebFactory, token: Optional[str]) -> None:
    """Thousands of random requests over hostile Redis: no 5xx, bad JSON, traceback or secret; the server stays up."""
    seed = int(os.environ.get("SMQSUP_FUZZ_SEED") or random.randrange(2**32))  # set it to replay a failure
    print(f"fuzz seed {seed} (replay: SMQSUP_FUZZ_SEED={seed})")
    seed_hostile(redis_client)
    redis_client.config_set("requirepass", PASSWORD)
    server = web(*(("--token", token) if token else ()), url=f"{redis_url}?password={PASSWORD}")
    statuses = _fuzz(server, seed)
    print(f"replies by status: {dict(sorted(statuses.items()))}")
    assert sum(statuses.values()) >= 500, f"seed={seed}: only {statuses} in {FUZZ_SECONDS} s"
    assert statuses.get(200, 0) >= 0.02 * sum(statuses.values()), f"seed={seed}: too few got through: {statuses}"
    headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
    assert server.request("GET", "/api/status", headers=headers)[0] == 200, f"seed={seed}"
    check_log(server, (PASSWORD, token) if token else (PASSWORD,))


@pytest.mark.parametrize("state", [*browse.STATES, "dead-api"])
def test_listing_1000_frames_of_1_mib_through_the_api_reads_a_bounded_number_of_bytes(
        shared_web: SharedWeb, state: str) -> None:
    """GET messages?limit=1000 (and dead?limit=1000) over 1000 frames of 1 MiB: 200, under 8.25 MiB read, every row."""
    from tests.test_listing_bounds import BOUND, K, seed, sent

    redis_client = shared_web.client
    redis_client.config_set("appendonly", "no")  # a gigabyte need not reach the disk
    expected = seed(redis_client, state.removesuffix("-api"), 1 << 20)
    server = shared_web.server
    before = sent(redis_client, K.pending)
    path = ("/api/queues/q/dead?limit=1000" if state == "dead-api"
            else f"/api/queues/q/messages?state={state}&limit=1000")
    status, _, body = server.request("GET", path)
    read = sent(redis_client, K.pending) - before
    assert status == 200, body[:300]
    assert read < BOUND, f"{state}: {read} bytes read"
    listing = strict_json(body)
    rows = listing["entries"] if state == "dead-api" else listing["messages"]
    assert [r["id"] for r in rows] == [mid for mid, _ in expected]
    if state != "dead-api":
        assert [r["size"] for r in rows] == [size for _, size in expected]
    assert any(r["cut"] for r in rows) and all(r["attempts"] == 0 for r in rows)
