"""``GET /api/queues/{queue}/events`` of the real ``smqsup web``: the newest
events, then only newer ones with the returned cursors, partitions, hostile
parameters and hostile streams; and how the newest are found in a long one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.core.declared import Declared
from tests import test_browser
from tests.support.webserver import WebServer
from tests.test_browser import XSS, _count, _wait
from tests.test_web_hostile import check_log, check_reply, raw_request, request_bytes, seed_hostile, strict_json

pytestmark = pytest.mark.topologies

TOKEN = "events-test-token"
K = QueueKeys("smq", "q")
EVENTS = "/api/queues/q/events"

WebFactory = Callable[..., WebServer]
#: The headless Chromium fixture of the browser tests (skipped, with the reason, where it is missing).
browser = test_browser.browser


@pytest.fixture
def web(tmp_path: Path, redis_url: str) -> Iterator[WebFactory]:
    """Start ``smqsup web --url URL --listen 127.0.0.1:0 [ARGS]``; each is stopped at teardown."""
    started: list[WebServer] = []

    def _start(*args: str) -> WebServer:
        log_dir = tmp_path / f"web{len(started)}"
        log_dir.mkdir()
        started.append(WebServer("--url", redis_url, "--listen", "127.0.0.1:0", *args, log_dir=log_dir))
        return started[-1]

    yield _start
    for server in started:
        assert server.stop() == 0, server.log()


@pytest.fixture
def broker(redis_url: str, redis_client: "redis.Redis[Any]") -> Iterator[Broker]:
    """A Broker on the test's Redis; q known, and declared with events: true as its consumers would."""
    redis_client.sadd("smq:queues", "q")
    b = Broker(redis_url)
    b.queues.declare_options("q", Declared(0, 10_000))
    try:
        yield b
    finally:
        b.close()


def _entries(client: "redis.Redis[Any]", key: str, first_ms: int, n: int, step_ms: int = 1000) -> list[str]:
    """Add ``n`` "published" entries (ids m0...) to ``key``, ``step_ms`` apart from ``first_ms``; their cursors."""
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(key, {"event": "published", "id": f"m{i}", "attempts": "0"}, id=f"{first_ms + i * step_ms}-0")
    return [c.decode() for c in pipe.execute()]


def _get(server: WebServer, query: str = "", **headers: str) -> dict[str, Any]:
    status, _, body = server.request("GET", EVENTS + query, headers=headers)
    assert status == 200, (status, body)
    return dict(strict_json(body))


def test_the_newest_events_then_only_newer_ones(redis_url: str, broker: Broker, web: WebFactory) -> None:
    """No after: the newest limit events and the cursors; with the answer's after: only what came since, then none."""
    with Producer(redis_url) as producer:
        ids = [producer.publish("q", i) for i in range(3)]
        server = web()
        first = _get(server, "?limit=2")
        assert [(e["event"], e["id"], e["attempts"]) for e in first["events"]] == [
            ("published", ids[1], 0), ("published", ids[2], 0)]
        cursor = first["events"][-1]["cursor"]
        assert first["cursors"] == {"q": cursor} and first["after"] == f"0={cursor}"
        assert first["queue"] == "q" and first["more"] is False and first["events_max"] == 10_000
        later = producer.publish("q", 3)
    second = _get(server, f"?after={first['after']}")
    assert [e["id"] for e in second["events"]] == [later] and second["after"] != first["after"]
    assert _get(server, f"?after={second['after']}") == {**second, "events": []}
    assert [e["id"] for e in _get(server)["events"]] == [*ids, later]
    check_log(server)


def test_partitions_are_merged_and_a_busy_stream_says_more(redis_client: "redis.Redis[Any]", broker: Broker,
                                                           web: WebFactory) -> None:
    """Two partitions: merged in cursor order, a cursor each; more than limit waiting: "more", the oldest first."""
    redis_client.set(K.partitions, "2")
    _entries(redis_client, K.events, 1_000_000, 3, step_ms=2)
    _entries(redis_client, QueueKeys("smq", "q~1").events, 1_000_001, 3, step_ms=2)
    server = web()
    newest = _get(server, "?limit=4")
    assert [(e["queue"], e["cursor"]) for e in newest["events"]] == [
        ("q", "1000002-0"), ("q~1", "1000003-0"), ("q", "1000004-0"), ("q~1", "1000005-0")]
    assert newest["after"] == "0=1000004-0,1=1000005-0" and newest["cursors"] == {"q": "1000004-0", "q~1": "1000005-0"}
    behind = _get(server, "?limit=2&after=0=0-0")
    assert [e["cursor"] for e in behind["events"]] == ["1000000-0", "1000001-0"] and behind["more"] is True
    assert behind["after"] == "0=1000000-0,1=1000001-0"
    rest = _get(server, f"?limit=100&after={behind['after']}")
    assert len(rest["events"]) == 4 and rest["more"] is False
    exact = _get(server, f"?limit=4&after={behind['after']}")  # exactly limit left: no "more"
    assert len(exact["events"]) == 4 and exact["more"] is False


def test_the_newest_events_of_partitions_are_merged_with_their_cursors(redis_client: "redis.Redis[Any]",
                                                                       broker: Broker) -> None:
    """Two partitions' streams, interleaved in time: newest(N) is the newest N of both in order, and each
    partition's cursor is its newest entry (an empty one: 0-0)."""
    first = _entries(redis_client, K.events, 1_600_000_000_000, 300, step_ms=2)
    second = _entries(redis_client, QueueKeys("smq", "q~1").events, 1_600_000_000_001, 300, step_ms=2)
    merged = sorted(first + second, key=lambda c: int(c.split("-")[0]))
    got, cursors = broker.events.newest(["q", "q~1", "q~2"], 100)
    assert [e.cursor for e in got] == merged[-100:]
    assert cursors == {"q": first[-1], "q~1": second[-1], "q~2": "0-0"}
    assert broker.events.newest(["q"], 0) == ([], {"q": first[-1]})


def test_no_events_says_whether_the_queue_records_them(redis_url: str, redis_client: "redis.Redis[Any]",
                                                      web: WebFactory) -> None:
    """Known queues without a stream: no events; events_max 0 for one without events: true, else its cap."""
    redis_client.sadd("smq:queues", "q", "r")
    b = Broker(redis_url)
    try:
        b.queues.declare_options("r", Declared(0, 50))
    finally:
        b.close()
    server = web()
    assert _get(server) == {"queue": "q", "events": [], "cursors": {"q": "0-0"}, "after": "0=0-0", "more": False,
                            "events_max": 0}
    assert server.json("/api/queues/r/events?after=0=5-5")["events_max"] == 50


#: Values of after that are not what an answer gave: (value, the start of the error).
_BAD_AFTER = [("", "after: expected INDEX=MS-SEQ"), ("0=1", "after: expected"), ("q=1-1", "after: expected"),
              ("0=1-1,0=1-2", "after: expected"), ("0=a-1", "after: expected"), ("0=-1-1", "after: expected"),
              ("0=1-1,", "after: expected"), ("0=%D9%A1-1", "after: expected"), ("0=1-1%0a", "after: expected"),
              ("0=18446744073709551616-0", "after: expected"), ("0=1-" + "9" * 21, "after: expected"),
              ("64=1-1", "after: expected"), ("100=1-1", "after: expected"), ("%ff", "after: expected"),
              ("%ED%A0%80", "after: expected"), ("0=1-1" + ",0=1-1" * 700, "after: longer than 3072"),
              ("1=1-1", "after: queue 'q' has no partition 1 (it has 1"),
              ("0=1-1,63=1-1", "after: queue 'q' has no partition 63")]


def test_hostile_parameters_get_a_400_naming_them(redis_client: "redis.Redis[Any]", web: WebFactory) -> None:
    """after garbage, repeated, too long, another partition; limit negative, NaN, huge, 1.5: a one-line JSON 400."""
    redis_client.sadd("smq:queues", "q")
    server = web()
    cases = [(f"after={v}", e) for v, e in _BAD_AFTER] + [
        (f"limit={v}", "limit: expected an integer from 1 to 500") for v in
        ("-1", "0", "NaN", "1.5", "501", "9" * 5000, "", "%EF%BC%91", "1e3", "+5")]
    for query, expected in cases:
        target = f"{EVENTS}?{query}"
        status, headers, body = raw_request(server.address, request_bytes("GET", target, server.address))
        check_reply(status, headers, body, target[:80])
        problem = strict_json(body)["error"]
        assert status == 400 and problem.startswith(expected), (target[:80], status, problem)
        assert problem.isprintable() and len(problem) < 200, problem
    for name in ("nosuch", "a%7Bb%7D", "%2e%2e", "x" * 300):
        status, _, body = server.request("GET", f"/api/queues/{name}/events")
        assert status in (400, 404) and strict_json(body)["error"].startswith("queue: "), (name, body)
    check_log(server)


def test_hostile_stream_entries_are_strict_json(redis_client: "redis.Redis[Any]", broker: Broker,
                                                web: WebFactory) -> None:
    """NaN, undecodable bytes, escapes and garbage fields in the stream: a 200 of strict JSON, garbage as malformed."""
    redis_client.xadd(K.events, {"event": "progress", "id": "a\x1b[2J", "attempts": "0", "data": '{"v": NaN}'})
    redis_client.xadd(K.events, {"event": "dead", "id": b"\xff\xfe", "attempts": "1", "data": b'"\\udcff"'})
    redis_client.xadd(K.events, {"event": "<img src=x onerror=alert(1)>", "x": "\x07"})
    server = web()
    got = _get(server)["events"]
    assert [(e["event"], e["id"], e["data"]) for e in got[:2]] == [
        ("progress", "a\x1b[2J", {"v": None}), ("dead", "\\xff\\xfe", "\ufffd")]
    assert got[2]["event"] == "malformed" and got[2]["id"] == ""
    seed_hostile(redis_client)  # and deep, huge and undecodable entries
    assert len(_get(server, "?after=0=0-0")["events"]) == 7 and len(_get(server)["events"]) == 7
    check_log(server)


def test_a_stream_key_of_the_wrong_type_is_a_503_and_the_server_goes_on(
        redis_client: "redis.Redis[Any]", broker: Broker, web: WebFactory) -> None:
    """q's event stream holding a string: a one-line JSON 503 naming the read, with or without after; then 200s."""
    redis_client.set(K.events, "garbage")
    server = web()
    for query in ("", "?after=0=0-0"):
        status, headers, body = server.request("GET", EVENTS + query)
        assert status == 503 and headers["content-type"].startswith("application/json"), (status, body)
        assert strict_json(body)["error"].startswith("read the events of 'q': Redis error: WRONGTYPE"), body
    redis_client.delete(K.events)
    assert _get(server)["events"] == [] and server.request("GET", "/api/status")[0] == 200
    check_log(server)


def test_the_endpoint_needs_the_token(redis_client: "redis.Redis[Any]", broker: Broker, web: WebFactory) -> None:
    """With a token: 401 without it or with a wrong one, 200 with it."""
    server = web("--token", TOKEN)
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, _, body = server.request("GET", EVENTS, headers=headers)
        assert status == 401 and strict_json(body)["error"].startswith("token required"), headers
    assert _get(server, **{"Authorization": f"Bearer {TOKEN}"})["queue"] == "q"


def test_the_page_shows_a_live_event_log_newest_on_top_as_text(
        browser: Any, redis_url: str, redis_client: "redis.Redis[Any]", broker: Broker, web: WebFactory) -> None:
    """The Events panel of the browsed queue: newest on top, hostile data as text, a new event live; none: says so."""
    redis_client.sadd("smq:queues", "r")
    redis_client.xadd(K.events, {"event": "dead", "id": "x1", "attempts": "2", "data": json.dumps({"reason": XSS})})
    server = web()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None)
    page.goto(f"{server.url}/")
    rows = "[data-testid=event-row]"
    _wait(page, f"() => document.querySelectorAll('{rows}').length === 1", "the stream's event")
    assert page.inner_text(f"{rows} td.body") == json.dumps({"reason": XSS}, separators=(",", ":"))
    with Producer(redis_url) as producer:
        mid = producer.publish("q", 1)
    _wait(page, f"() => document.querySelector('{rows}').dataset.id === '{mid}'", "the new event on top")
    assert page.eval_on_selector_all(rows, "rs => rs.map(r => r.dataset.event)") == ["published", "dead"]
    assert _count(page, "[data-testid=events-table] img") == 0 and page.evaluate("window.__xss") is None
    page.select_option("[data-testid=browse-queue]", "r")
    _wait(page, "() => document.querySelector('[data-testid=events-info]').textContent === "
                "'no events: set `events: true` on this queue'", "the note of a queue without events")
    assert _count(page, rows) == 0 and problems == []
    page.close()
