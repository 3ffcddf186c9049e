"""``smqsup events``: the real command against a real redis-server (and a
Redis Cluster): a message's events as text and JSON, --since, --limit,
--follow stopped by a signal, and what hostile stream entries become."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
from collections.abc import Callable
from typing import Any, NoReturn

import pytest
import redis

from smqsup.cli.events_cmd import since
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from smqsup.store.core.declared import Declared
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.inproc import Running
from tests.test_acl_tls import PASSWORD, readme_acl_words
from tests.test_web_hostile import FAIRLY_DEEP

pytestmark = pytest.mark.topologies

K = QueueKeys("smq", "q")
#: A text line: UTC time with ms, the event (padded), the id, the attempts, then the rest.
_LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)  (\w+) *  (\S+)  attempts=(\d+)(.*)")
#: Seconds 1700000000 (2023-11-14T22:13:20Z) and on, one a second: the ids of the entries _entries adds.
_T0 = 1_700_000_000


def _declare(url: str) -> None:
    """Declare the queue's options as its consumers with events: true would."""
    broker = Broker(url)
    try:
        broker.queues.declare_options("q", Declared(0, 10_000))
    finally:
        broker.close()


def _entries(client: "redis.Redis[Any]", *fields: dict[str, Any]) -> list[str]:
    """Add each entry to q's stream, one a second from _T0 (as anyone with
    access to Redis could write them); their cursors."""
    return [client.xadd(K.events, f, id=f"{(_T0 + i) * 1000}-0").decode() for i, f in enumerate(fields)]


def _published(n: int) -> list[dict[str, Any]]:
    return [{"event": "published", "id": f"m{i}", "attempts": "0"} for i in range(n)]


def _events(url: str, *more: str) -> "subprocess.CompletedProcess[str]":
    return procs.run("events", "--url", url, "q", *more, timeout=30)


def _json_rows(r: "subprocess.CompletedProcess[str]") -> list[dict[str, Any]]:
    assert r.returncode == 0, r.stderr
    return [json.loads(line, parse_constant=_refuse) for line in r.stdout.splitlines()]


def _refuse(name: str) -> NoReturn:
    raise AssertionError(f"{name} in a JSON line")


def _one_line_error(r: "subprocess.CompletedProcess[str]", text: str, code: int) -> None:
    assert r.returncode == code and r.stdout == "", r
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1 and text in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_messages_events_as_text_and_as_json(start: Callable[..., Running], producer: Producer,
                                               redis_url: str) -> None:
    """published, started, progress 0.5, done: one UTC line each, and the same events as JSON lines."""
    def handle(m: Any) -> str:
        m.progress({"done": 0.5})
        return "ok"
    _declare(redis_url)
    start(handle, events=True)
    mid = producer.publish("q", {"n": 1})
    wait_for(lambda: [e.event for e in producer.events("q")][-1:] == ["done"])
    text = _events(redis_url)
    assert text.returncode == 0 and text.stderr == "", text
    lines = [_LINE.fullmatch(line) for line in text.stdout.splitlines()]
    assert all(lines), text.stdout
    assert [(m[2], m[3], m[4], m[5]) for m in lines if m] == [
        ("published", mid, "0", ""), ("started", mid, "0", ""), ("progress", mid, "0", '  {"done":0.5}'),
        ("done", mid, "0", "")]
    rows = _json_rows(_events(redis_url, "--json"))
    assert rows == [e.to_json() for e in producer.events("q")]
    assert [r["event"] for r in rows] == ["published", "started", "progress", "done"]


def test_since_a_cursor_a_time_or_now_and_limit(redis_url: str, redis_client: "redis.Redis[Any]") -> None:
    """--since after a cursor, from an ISO time, or now (nothing yet); --limit N stops after N."""
    _declare(redis_url)
    cursors = _entries(redis_client, *_published(3))
    ids = lambda *more: [r["id"] for r in _json_rows(_events(redis_url, "--json", *more))]  # noqa: E731
    assert ids("--since", cursors[0]) == ["m1", "m2"]
    assert ids("--since", "2023-11-14T22:13:21Z", "--limit", "1") == ["m1"]
    assert ids("--since", "now") == []
    text = _events(redis_url, "--limit", "2")
    assert text.stdout == ("2023-11-14T22:13:20.000Z  published  m0  attempts=0\n"
                           "2023-11-14T22:13:21.000Z  published  m1  attempts=0\n"), text


def test_since_reads_now_cursors_unix_seconds_and_iso_times() -> None:
    """--since's value: now and cursors as they are, unix seconds and ISO-8601 times (UTC unless zoned) as seconds."""
    assert [since(v) for v in ("now", "1700000000000-0", "18446744073709551615-18446744073709551615")] == [
        "now", "1700000000000-0", "18446744073709551615-18446744073709551615"]
    assert [since(v) for v in ("1700000001", "1700000001.5", "0", "2023-11-14T22:13:21Z", "2023-11-14 22:13:21",
                               "2023-11-14T22:13:21.500z", "2023-11-14T23:13:21+01:00", "2023-11-14")] == [
        _T0 + 1, _T0 + 1.5, 0.0, _T0 + 1, _T0 + 1, _T0 + 1.5, _T0 + 1, _T0 - 80_000]
    for value in ("bogus", "nan", "inf", "-5", "1e9", "1-2-3", "18446744073709551616-0", "1969-12-31", "",
                  "now ", "\x1b[2J", "9" * 5000, "2023-13-01", "１２", "1-"):
        with pytest.raises(argparse.ArgumentTypeError, match="^expected now, a cursor MS-SEQ, unix seconds"):
            since(value)


def test_a_bad_since_is_one_line_naming_it() -> None:
    """--since garbage or a terminal escape: exit 2, one escaped line naming --since, before any connection."""
    for value in ("bogus", "\x1b[2J"):
        r = procs.run("events", "--url", "redis://127.0.0.1:1/0", "q", "--since", value, timeout=30)
        _one_line_error(r, "smqsup events: argument --since: expected now, a cursor MS-SEQ, unix seconds", 2)
        assert "\x1b" not in r.stderr and len(r.stderr) < 300, r.stderr


@pytest.mark.parametrize("args, named", [
    (["--since", "9" * 5000], "--since"), (["--since", "nan"], "--since"), (["--since", "-1"], "--since"),
    (["--since", "1e400"], "--since"), (["--since", "1-" + "9" * 30], "--since"), (["--limit", "0"], "--limit"),
    (["--limit", "-1"], "--limit"), (["--limit", "9" * 5000], "--limit"), (["--limit", "nan"], "--limit")])
def test_hostile_since_and_limit_are_one_line_naming_them(args: list[str], named: str) -> None:
    """Huge, negative, NaN, overflowing: exit 2 with one short line naming the flag, before any connection."""
    r = procs.run("events", "--url", "redis://127.0.0.1:1/0", "q", *args, timeout=30)
    _one_line_error(r, f"smqsup events: argument {named}: ", 2)
    assert len(r.stderr) < 300, r.stderr


def test_a_missing_queue_is_one_line() -> None:
    """No QUEUE: exit 2, the usage error names it."""
    r = procs.run("events", "--url", "redis://127.0.0.1:1/0", timeout=30)
    assert r.returncode == 2 and "QUEUE" in r.stderr and "Traceback" not in r.stderr


class _Follower:
    """``smqsup events --follow`` in a subprocess, its stdout read as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = procs.smqsup("events", *args, "--follow")
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._out = b""

    def lines(self) -> list[str]:
        """The whole lines printed so far."""
        assert self.proc.stdout is not None
        try:
            self._out += os.read(self.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            pass
        return self._out.decode().splitlines()[:self._out.count(b"\n")]

    def stop(self, sig: int) -> tuple[int, str]:
        """Send ``sig``; its exit status and stderr."""
        self.proc.send_signal(sig)
        code = self.proc.wait(10)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_follow_prints_what_comes_next_and_stops_on_a_signal(redis_url: str, redis_client: "redis.Redis[Any]",
                                                             producer: Producer, sig: int) -> None:
    """--follow shows the stream, then a message published after that; SIGTERM or SIGINT: exit 0, no traceback."""
    _declare(redis_url)
    _entries(redis_client, *_published(1))
    follower = _Follower("--url", redis_url, "q")
    try:
        wait_for(lambda: len(follower.lines()) == 1, message="the stream's event not shown")
        mid = producer.publish("q", 1)
        later = wait_for(lambda: follower.lines()[1:], message="the event published later not shown")
        assert later[0].endswith(f"  published  {mid}  attempts=0"), later
    finally:
        code, stderr = follower.stop(sig)
    assert code == 0 and all(line.startswith("smqsup events: note: ") for line in stderr.splitlines()), stderr


@pytest.mark.single_node("the test restarts the one redis-server")
@pytest.mark.timeout(90)
def test_follow_goes_on_across_a_restart_of_redis(redis_server: RedisServer, redis_url: str,
                                                  redis_client: "redis.Redis[Any]") -> None:
    """--follow while its redis-server is stopped and started again: a note that Redis was lost and one
    that it is back, no exit, and the events published after the restart are printed, none twice."""
    _declare(redis_url)
    _entries(redis_client, *_published(1))
    follower = _Follower("--url", redis_url, "q")
    try:
        wait_for(lambda: len(follower.lines()) == 1, message="the stream's event not shown")
        redis_server.stop()
        redis_server.start()
        with Producer(redis_url) as p:
            mid = p.publish("q", 1)
        later = wait_for(lambda: follower.lines()[1:], timeout_s=30, message="no event after the restart")
        assert later[0].endswith(f"  published  {mid}  attempts=0") and len(later) == 1, later
        assert follower.proc.poll() is None
    finally:
        code, stderr = follower.stop(signal.SIGTERM)
    assert code == 0, stderr
    notes = stderr.splitlines()
    assert any(n.startswith("smqsup events: note: Redis lost (") for n in notes), notes
    assert "smqsup events: note: Redis is back; following on" in notes and "Traceback" not in stderr


def test_since_means_the_same_to_producer_events_and_to_the_command_line(redis_url: str) -> None:
    """One rule for since: digits are unix seconds in Producer.events as in --since (text or a number),
    an ISO time and a cursor read the same in both; 13 digits (milliseconds) are refused by both, saying
    so; a cursor MS-0 is how to name a time in ms."""
    from smqsup.client.event_cursor import Reading
    from smqsup.errors import MessageError

    for text in ("1700000000", "1700000000.5", "2023-11-14T22:13:20Z", "1700000000000-0", "0"):
        assert Reading(text).first == Reading(since(text)).first, text
    assert Reading(1_700_000_000).first == Reading("1700000000").first == "1699999999999-18446744073709551615"
    for ms in ("1700000000000", 1_700_000_000_000):
        with pytest.raises(MessageError, match=r"^since: expected now.*milliseconds\? divide them by 1000"):
            Reading(ms)
    with pytest.raises(argparse.ArgumentTypeError, match=r"milliseconds\? divide them by 1000, or pass the "
                                                          r"cursor '1700000000000-0'"):
        since("1700000000000")
    with Producer(redis_url) as p:
        with pytest.raises(MessageError, match="milliseconds"):
            p.events("q", since="1700000000000")


def test_follow_with_limit_stops_after_n(redis_url: str, redis_client: "redis.Redis[Any]") -> None:
    """--follow --limit 2 over a stream of three: two lines, exit 0, without waiting for more."""
    _declare(redis_url)
    _entries(redis_client, *_published(3))
    r = _events(redis_url, "--follow", "--limit", "2")
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r


def test_hostile_entries_are_shown_escaped_on_one_line_each(redis_url: str,
                                                            redis_client: "redis.Redis[Any]") -> None:
    """Terminal escapes, bidi overrides, undecodable bytes, NaN and garbage in entries: escaped, one line each."""
    _declare(redis_url)
    _entries(redis_client,
             {"event": "dead", "id": "a\x1b[2J\nb", "attempts": "1", "data": '{"reason": "\\u001b]0;x\\u0007\u202e"}'},
             {"event": "progress", "id": b"\xff\xfe", "attempts": "0", "data": b"\x1b[31m\xff"},
             {"event": "progress", "id": "n", "attempts": "0", "data": '{"v": NaN}'},
             {"event": "\x1b[5m", "garbage": "\x07" * 3},
             {"event": "progress", "id": "deep", "attempts": "0", "data": FAIRLY_DEEP})
    text = _events(redis_url)
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 5, text
    for bad in ("\x1b", "\x07", "\u202e", "\ufffd"):
        assert bad not in text.stdout, (bad, text.stdout)
    assert "a\\x1b[2J\\nb" in text.stdout and "\\xff\\xfe" in text.stdout and "\\u202e" in text.stdout
    assert text.stdout.splitlines()[3].split()[1] == "malformed"
    rows = _json_rows(_events(redis_url, "--json"))
    assert all(line.isascii() for line in _events(redis_url, "--json").stdout.splitlines())
    assert rows[0]["id"] == "a\x1b[2J\nb" and rows[0]["data"] == {"reason": "\x1b]0;x\x07\u202e"}
    assert rows[2]["data"] == '{"v":NaN}' and rows[3]["event"] == "malformed"


def test_a_stream_key_of_the_wrong_type_is_one_line_exit_1(redis_url: str,
                                                           redis_client: "redis.Redis[Any]") -> None:
    """q's event stream key holding a string: one line naming the read and WRONGTYPE, exit 1, with or without --follow."""
    _declare(redis_url)
    with Producer(redis_url) as p:
        p.publish("q", 1)  # a queue in use, with events on: no note
    redis_client.delete(K.events)
    redis_client.set(K.events, "garbage")
    for more in ((), ("--follow",), ("--since", "now", "--json")):
        _one_line_error(_events(redis_url, *more), "Error: read the events of 'q': Redis error: WRONGTYPE", 1)


def test_notes_for_an_unused_queue_and_a_queue_without_events(redis_url: str) -> None:
    """A queue nobody used and whose consumers declared no events: exit 0, nothing on stdout, a note on each."""
    r = procs.run("events", "--url", redis_url, "ordrs", timeout=30)
    assert r.returncode == 0 and r.stdout == "", r
    assert r.stderr.splitlines() == [
        "smqsup events: note: no producer or consumer has used queue ordrs in namespace smq yet",
        "smqsup events: note: the consumers of ordrs have not declared events: true (set it on the queue "
        "in queues.yaml to record its messages' events)"]


def test_a_password_in_the_url_is_never_shown(redis_server: RedisServer, redis_client: "redis.Redis[Any]") -> None:
    """With the README's ACL user the command works; with a wrong password: one line, exit 1, no password."""
    assert redis_client.execute_command(*readme_acl_words()) in (b"OK", True)
    url = f"unix://smqsup:{PASSWORD}@{redis_server.socket_path}"
    _declare(url)
    _entries(redis_client, *_published(1))
    ok = procs.run("events", "--url", url, "q", "--json", timeout=30)
    assert [r["id"] for r in _json_rows(ok)] == ["m0"] and PASSWORD not in ok.stdout + ok.stderr
    wrong = procs.run("events", "--url", url.replace(PASSWORD, PASSWORD + "x"), "q", timeout=30)
    _one_line_error(wrong, "Error: ", 1)
    assert PASSWORD not in wrong.stderr
