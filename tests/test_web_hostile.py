"""Hostile input against the real ``smqsup web``: no request and no bytes
already in Redis get a 5xx, invalid JSON, a traceback or a secret out of it."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, Optional

import pytest
import redis
from aiohttp.test_utils import TestClient, TestServer

from smqsup import safe
from smqsup.broker import Broker
from smqsup.web.server import build_app
from smqsup.web.source import Source
from tests.webserver import WebServer

TOKEN = "hostile-test-token"
PASSWORD = "hostile-redis-pass"

#: A dead letter whose frame holds a bare NaN (Python's json reads it, strict JSON has no NaN).
NAN_DEAD_LETTER = b'{"reason":"x","at_ms":1}\n0|{"id":"a","queue":"q","body":NaN,"created_at":1,"headers":{}}'
DEEP = b"[" * 100_000 + b"]" * 100_000

WebFactory = Callable[..., WebServer]


def _refuse(name: str) -> NoReturn:
    raise ValueError(f"{name} is not strict JSON")


def strict_json(body: bytes) -> Any:
    """``body`` decoded as strict JSON: UTF-8, and no NaN or Infinity."""
    return json.loads(body.decode("utf-8"), parse_constant=_refuse)


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


def test_a_dead_letter_holding_nan_is_listed_as_strict_json(redis_client: redis.Redis, web: WebFactory) -> None:
    """GET /api/queues/q/dead over a frame with a bare NaN answers strict JSON listing it."""
    redis_client.lpush("smq:{q}:dead", NAN_DEAD_LETTER)
    server = web()
    status, headers, body = server.request("GET", "/api/queues/q/dead")
    assert status == 200 and headers["content-type"].startswith("application/json")
    listing = strict_json(body)
    assert listing["total"] == 1 and len(listing["entries"]) == 1


@pytest.mark.parametrize("token", [None, TOKEN])
def test_undecodable_headers_and_odd_arguments_get_a_json_4xx(web: WebFactory, token: Optional[str]) -> None:
    """Raw 0xff in Authorization or Cookie, "²" or 5,000 digits, deep or non-UTF-8 bodies: a JSON 4xx, no traceback."""
    server = web(*(("--token", token) if token else ()))
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


def test_dot_and_dotdot_queue_names_in_the_path_get_a_4xx(web: WebFactory) -> None:
    """'.' and '..' as the queue in the path, plain or %-encoded: a 4xx JSON error, never a listing."""
    server = web()
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
