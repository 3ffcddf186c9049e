"""Hostile input against the real ``smqsup web``: no request and no bytes
already in Redis get a 5xx, invalid JSON, a traceback or a secret out of it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis

from tests.webserver import WebServer

#: A dead letter whose frame holds a bare NaN (Python's json reads it, strict JSON has no NaN).
NAN_DEAD_LETTER = b'{"reason":"x","at_ms":1}\n0|{"id":"a","queue":"q","body":NaN,"created_at":1,"headers":{}}'

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


# --- the reproduced bugs, one at a time ------------------------------------------------


def test_a_dead_letter_holding_nan_is_listed_as_strict_json(redis_client: redis.Redis, web: WebFactory) -> None:
    """GET /api/queues/q/dead over a frame with a bare NaN answers strict JSON listing it."""
    redis_client.lpush("smq:{q}:dead", NAN_DEAD_LETTER)
    server = web()
    status, headers, body = server.request("GET", "/api/queues/q/dead")
    assert status == 200 and headers["content-type"].startswith("application/json")
    listing = strict_json(body)
    assert listing["total"] == 1 and len(listing["entries"]) == 1
