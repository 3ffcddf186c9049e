"""``smqsup pause``, ``resume``, ``messages`` and ``remove``: the real command
against a real redis-server, and what each does with hostile arguments."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from tests.support import procs
from tests.support.helpers import holds, wait_for
from tests.test_acl_tls import PASSWORD, readme_acl_words

pytestmark = pytest.mark.topologies

K = QueueKeys("smq", "q")


def _rows(r: "subprocess.CompletedProcess[str]") -> list[dict[str, Any]]:
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def _listed(url: str, state: str, *more: str) -> list[dict[str, Any]]:
    return _rows(procs.run("messages", "--url", url, "q", "--state", state, "--json", *more))


def _hold(broker: Broker, consumer: str) -> bytes:
    """Register ``consumer`` and let it take the next message, as a consumer does."""
    broker.registry.register_consumer("q", consumer, ConsumerInfo(pid=1, host="test", queue="q"))
    frame = broker.messages.take("q", consumer).next_frame
    assert frame is not None
    return frame


def _nack(broker: Broker, consumer: str, frame: bytes, *, dead: bool) -> None:
    """Fail the held frame: dead-letter it, or retry it in an hour."""
    broker.messages.nack("q", consumer, frame, retry_threshold=-1 if dead else 5, delay_ms=3_600_000,
                         meta='{"reason":"ValueError: boom"}', fetch_next=False)


# --- pause and resume --------------------------------------------------------


def test_pause_then_resume_flips_the_flag_and_says_what_happened(redis_url: str,
                                                                  redis_client: "redis.Redis") -> None:
    """pause sets the queue's flag (by cli@host), a second pause and resume say nothing changed, exit 0 each."""
    with Producer(redis_url) as p:
        p.publish("q", 1)
    r = procs.run("pause", "--url", redis_url, "q")
    assert r.returncode == 0 and r.stdout.startswith("paused q:") and r.stderr == "", r
    flag = json.loads(redis_client.get(K.paused) or b"null")
    assert flag["by"] == f"cli@{socket.gethostname()}"
    again = procs.run("pause", "--url", redis_url, "q")
    assert again.returncode == 0 and "q was already paused (since 20" in again.stdout
    assert f"by cli@{socket.gethostname()}); nothing changed" in again.stdout
    r = procs.run("resume", "--url", redis_url, "q")
    assert r.returncode == 0 and r.stdout.startswith("resumed q:") and not redis_client.exists(K.paused)
    again = procs.run("resume", "--url", redis_url, "q")
    assert again.returncode == 0 and again.stdout == "q was not paused; nothing changed\n"


def test_a_paused_queue_keeps_its_message_pending_until_resumed(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """Paused by the CLI, a running consumer leaves a new message pending; resumed, it handles it."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    assert procs.run("pause", "--url", redis_url, "q").returncode == 0
    with Producer(redis_url) as p:
        mid = p.publish("q", {"n": 1})
    # A consumer blocked in BLMOVE may take it once and hand it straight back.
    wait_for(lambda: redis_client.llen(K.pending) == 1)
    holds(lambda: redis_client.llen(K.pending) == 1 and not sup.events(), 1.5)
    assert [row["id"] for row in _listed(redis_url, "pending")] == [mid]
    assert procs.run("resume", "--url", redis_url, "q").returncode == 0
    [done] = wait_for(lambda: sup.events("done"))
    assert done["id"] == mid


def test_a_garbage_pause_flag_is_shown_escaped(redis_url: str, redis_client: "redis.Redis") -> None:
    """A paused flag anybody wrote (not JSON, a NaN or huge time, a terminal escape) still reads as one line."""
    for flag in (b"\xff{", b'{"at_ms": NaN, "by": "\\u001b[31mred"}', b'{"at_ms": 1e400, "by": 7}', b"[1]"):
        redis_client.set(K.paused, flag)
        r = procs.run("pause", "--url", redis_url, "q")
        assert r.returncode == 0 and r.stdout.count("\n") == 1 and "\x1b" not in r.stdout, r
        assert "already paused (since ? by " in r.stdout and redis_client.get(K.paused) == flag


def test_pause_and_resume_with_a_config_file_and_a_namespace(tmp_path: Path, redis_url: str,
                                                              redis_client: "redis.Redis") -> None:
    """-c FILE uses the file's url and namespace; $SMQSUP_REDIS_URL with --namespace another namespace."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:record"}},
                             namespace="billing")
    assert procs.run("pause", "-c", str(cfg), "q").returncode == 0
    assert redis_client.exists(QueueKeys("billing", "q").paused) and not redis_client.exists(K.paused)
    r = procs.run("resume", "--namespace", "billing", "q", env=procs.env(SMQSUP_REDIS_URL=redis_url))
    assert r.returncode == 0 and r.stdout.startswith("resumed q")
    assert not redis_client.exists(QueueKeys("billing", "q").paused)


def test_an_unused_queue_gets_a_note(redis_url: str) -> None:
    """Pausing a queue nobody has used yet works, with a note on stderr (a typo is seen)."""
    r = procs.run("pause", "--url", redis_url, "ordrs")
    assert r.returncode == 0 and r.stdout.startswith("paused ordrs")
    assert r.stderr == "smqsup pause: note: no producer or consumer has used queue ordrs in namespace smq yet\n"


# --- messages ----------------------------------------------------------------


@pytest.fixture
def every_state(redis_url: str) -> dict[str, str]:
    """One message in each place a message can be: name -> id."""
    broker = Broker(redis_url)
    ids: dict[str, str] = {}
    try:
        with Producer(redis_url) as p:
            for name, dead in (("retry", False), ("dead", True)):
                ids[name] = p.publish("q", {"n": name})
                _nack(broker, "c1", _hold(broker, "c1"), dead=dead)
            ids["processing"] = p.publish("q", {"n": "processing"})
            _hold(broker, "c1")
            ids["pending"] = p.publish("q", {"n": "pending"})
            ids["priority"] = p.publish("q", {"n": "priority"}, priority=7)
            ids["scheduled"] = p.publish("q", "later", delay=3600)
    finally:
        broker.close()
    return ids


def test_messages_lists_each_state_with_its_fields(redis_url: str, every_state: dict[str, str]) -> None:
    """--json rows: pending by priority, scheduled with due times (retries marked), the holder, the reason."""
    now = time.time()
    pending = _listed(redis_url, "pending")
    assert [(m["id"], m["priority"], m["attempts"]) for m in pending] == [
        (every_state["priority"], 7, 0), (every_state["pending"], 0, 0)]
    assert pending[1]["preview"] == '{"n":"pending"}' and pending[1]["size"] > 20
    assert abs(pending[0]["created_at"] - now) < 60
    scheduled = {m["id"]: m for m in _listed(redis_url, "scheduled")}
    assert set(scheduled) == {every_state["scheduled"], every_state["retry"]}
    later, retry = scheduled[every_state["scheduled"]], scheduled[every_state["retry"]]
    assert not later["retry"] and later["preview"] == "later" and abs(later["due_at"] - now - 3600) < 60
    assert retry["retry"] and retry["attempts"] == 1 and abs(retry["due_at"] - now - 3600) < 60
    [held] = _listed(redis_url, "processing")
    assert held["id"] == every_state["processing"] and held["consumer"] == "c1"
    [dead] = _listed(redis_url, "dead")
    assert dead["id"] == every_state["dead"] and dead["reason"] == "ValueError: boom"


def test_messages_prints_one_line_each_and_a_count(redis_url: str, every_state: dict[str, str]) -> None:
    """The human listing: one line per message with its fields, the count on stderr."""
    def lines(state: str) -> list[str]:
        r = procs.run("messages", "--url", redis_url, "q", "--state", state)
        assert r.returncode == 0, r.stderr
        count = len(r.stdout.splitlines())
        assert r.stderr == f"{count} {state} message(s) of q\n"
        return r.stdout.splitlines()

    first, second = lines("pending")
    assert first.startswith(every_state["priority"] + "  20") and "priority=7" in first
    assert 'body={"n":"priority"}' in first and "attempts=0" in first and "size=" in second
    assert any(every_state["retry"] in ln and "(retry)" in ln and "due=20" in ln for ln in lines("scheduled"))
    assert "consumer=c1" in lines("processing")[0]
    assert "reason=ValueError: boom" in lines("dead")[0]


def test_messages_limit_says_how_many_there_are(redis_url: str) -> None:
    """--limit 2 of 5 pending lists the oldest two and says 2 of 5."""
    with Producer(redis_url) as p:
        ids = p.publish_many("q", list(range(5)))
    r = procs.run("messages", "--url", redis_url, "q", "--limit", "2")
    assert r.returncode == 0 and [ln.split()[0] for ln in r.stdout.splitlines()] == ids[:2]
    assert r.stderr == "2 of 5 pending message(s) of q (--limit N shows more)\n"


def test_messages_json_is_strict_ascii_whatever_the_bytes(redis_url: str, redis_client: "redis.Redis") -> None:
    """Hostile bodies and a malformed frame: --json is strict ASCII JSON, the lines escaped, one each."""
    with Producer(redis_url) as p:
        mid = p.publish("q", {"t": "\x1b[2J\u202eé\U0001f600", "big": 10**30})
    redis_client.lpush(K.pending, b"0|\xff\x1b[31m\nnot json")
    redis_client.sadd("smq:queues", "q")

    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))

    r = procs.run("messages", "--url", redis_url, "q", "--json")
    assert r.returncode == 0 and r.stdout.isascii(), r
    rows = [strict(line) for line in r.stdout.splitlines()]
    assert rows[0]["id"] == mid and rows[1]["malformed"] and rows[1]["id"].startswith("raw-")
    human = procs.run("messages", "--url", redis_url, "q")
    assert human.returncode == 0 and len(human.stdout.splitlines()) == 2
    assert "\x1b" not in human.stdout and "\u202e" not in human.stdout and "malformed" in human.stdout
    removed = procs.run("remove", "--url", redis_url, "q", rows[1]["id"])
    assert removed.returncode == 0 and removed.stdout == f"removed {rows[1]['id']}\n"
    assert redis_client.llen(K.pending) == 1


# --- remove ------------------------------------------------------------------


def test_remove_deletes_waiting_messages_and_leaves_a_held_one(
        redis_url: str, redis_client: "redis.Redis", every_state: dict[str, str]) -> None:
    """A pending, a scheduled and a retry waiting are removed; the held one and an unknown id are not: exit 1."""
    asked = [every_state["pending"], every_state["scheduled"], every_state["retry"], every_state["processing"],
             "no-such-id"]
    r = procs.run("remove", "--url", redis_url, "q", *asked)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [f"removed {m}" for m in asked[:3]] + [
        f"not removed {m}: not waiting (held by a consumer, dead, or unknown)" for m in asked[3:]]
    assert r.stderr == "smqsup remove: 2 of 5 message(s) not removed from q\n"
    assert [row["id"] for row in _listed(redis_url, "pending")] == [every_state["priority"]]
    assert _listed(redis_url, "scheduled") == []
    assert [row["id"] for row in _listed(redis_url, "processing")] == [every_state["processing"]]
    assert redis_client.llen(K.processing("c1")) == 1


def test_remove_frees_the_dedup_key(redis_url: str, redis_client: "redis.Redis") -> None:
    """After removing the message holding a dedup key, publishing with that key queues a new message."""
    with Producer(redis_url) as p:
        first = p.publish("q", 1, dedup_key="order-7")
        p.publish("q", 2, dedup_key="order-7")  # deduplicated: nothing queued
        assert redis_client.llen(K.pending) == 1
        r = procs.run("remove", "--url", redis_url, "q", first, first)
        assert r.returncode == 0 and r.stdout == f"removed {first}\n" and r.stderr == ""
        assert redis_client.llen(K.pending) == 0
        second = p.publish("q", 3, dedup_key="order-7")
    [row] = _listed(redis_url, "pending")
    assert row["id"] == second != first and row["preview"] == "3"


def test_cancel_dead_letters_waiting_messages_and_answers_each_id(
        redis_url: str, redis_client: "redis.Redis", every_state: dict[str, str]) -> None:
    """Pending, scheduled and retrying: cancelled; the held one: stopping; an unknown id: exit 1 with a summary."""
    asked = [every_state["pending"], every_state["scheduled"], every_state["retry"], every_state["processing"],
             "no-such-id"]
    r = procs.run("cancel", "--url", redis_url, "q", *asked)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [f"cancelled {m}" for m in asked[:3]] + [
        f"stopping {asked[3]}: a consumer holds it",
        "unknown no-such-id: not waiting or held (finished untracked, or never published)"]
    assert r.stderr == "smqsup cancel: 1 of 5 message(s) not cancelled in q\n"
    assert redis_client.zscore(K.cancel, every_state["processing"]) is not None


# --- hostile arguments -------------------------------------------------------


def _one_line_error(r: "subprocess.CompletedProcess[str]", *parts: str, code: int = 2) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ") and r.stdout == "", r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr) < 400, r.stderr
    for part in parts:
        assert part in r.stderr, r.stderr


@pytest.mark.parametrize("limit", ["0", "-1", "1" + "0" * 400, "9" * 5000, "NaN", "", "1e3", "\udcff", "100001"])
def test_a_hostile_limit_is_one_line(redis_url: str, limit: str) -> None:
    """--limit 0, negative, 10^400, 5,000 digits, NaN, empty, undecodable or too big: a short usage error."""
    r = procs.run("messages", "--url", redis_url, "q", "--limit", limit)
    _one_line_error(r, "--limit", "expected an integer from 1 to 100000")


@pytest.mark.parametrize("state", ["bogus", "", "x" * 10_000, "\udcff\u202e"])
def test_a_hostile_state_is_one_line(redis_url: str, state: str) -> None:
    """--state that is not a state (empty, 10,000 characters, undecodable): a short usage error."""
    r = procs.run("messages", "--url", redis_url, "q", "--state", state)
    _one_line_error(r, "--state", "expected one of pending, scheduled, processing, dead")
    assert "\u202e" not in r.stderr


@pytest.mark.parametrize("command", [["pause"], ["resume"], ["messages"], ["remove", "--", "x", "id1"],
                                     ["cancel", "--", "x", "id1"]])
@pytest.mark.parametrize("queue, problem", [("a{b}", "'{' or '}'"), ("x" * 10_000, "1 to 128 characters"),
                                            ("", "1 to 128 characters"), ("\udcff", "1 to 128 characters")])
def test_a_hostile_queue_name_is_one_line(redis_url: str, command: list[str], queue: str, problem: str) -> None:
    """A queue name with braces, of 10,000 characters, empty or undecodable: one line naming QUEUE, exit 2."""
    args = [command[0], "--url", redis_url, *command[1:2], queue, *command[3:]]
    r = procs.run(*args)
    _one_line_error(r, f"smqsup {command[0]}: QUEUE:", problem)


@pytest.mark.parametrize("bad", ["", "\udcff", "x\udce9x", "a b", "x" * 129, "9" * 5000, "id\n", "é", "raw-\u202e"])
@pytest.mark.parametrize("command", ["remove", "cancel"])
def test_a_hostile_id_is_one_line(redis_url: str, bad: str, command: str) -> None:
    """An id empty, undecodable, with a lone surrogate, a space, a newline, or too long: one line naming ID."""
    r = procs.run(command, "--url", redis_url, "q", "ok-id", bad)
    _one_line_error(r, "argument ID", "expected a message id")
    assert "\udcff" not in r.stderr and "\u202e" not in r.stderr and "\n" not in r.stderr[:-1]


def test_5000_ids_are_each_answered(redis_url: str, redis_client: "redis.Redis") -> None:
    """remove with 5,000 ids (3 of them waiting): each is answered, the 3 removed, exit 1 and one summary."""
    with Producer(redis_url) as p:
        ids = p.publish_many("q", list(range(3)))
    asked = [f"unknown-{i}" for i in range(4997)] + ids
    r = procs.run("remove", "--url", redis_url, "q", *asked)
    assert r.returncode == 1 and r.stderr == "smqsup remove: 4997 of 5000 message(s) not removed from q\n"
    assert len(r.stdout.splitlines()) == 5000 and r.stdout.endswith("".join(f"removed {m}\n" for m in ids))
    assert redis_client.llen(K.pending) == 0


@pytest.mark.parametrize("command", [["pause", "q"], ["resume", "q"], ["messages", "q"], ["remove", "q", "id1"]])
def test_no_redis_is_one_line_and_the_password_never_shown(command: list[str]) -> None:
    """Nothing listening at the url: one line, exit 1, the url's password nowhere."""
    r = procs.run(command[0], "--url", f"redis://:{PASSWORD}@127.0.0.1:1/0", *command[1:], timeout=30)
    _one_line_error(r, "Redis connection failed", code=1)
    assert PASSWORD not in r.stderr


def test_a_password_in_the_url_is_never_shown(redis_server: RedisServer, redis_client: "redis.Redis") -> None:
    """With the README's ACL user (password in the url): every command works, no output shows the password."""
    assert redis_client.execute_command(*readme_acl_words()) in (b"OK", True)
    url = f"unix://smqsup:{PASSWORD}@{redis_server.socket_path}"
    with Producer(url) as p:
        mid = p.publish("q", {"secret?": "no"})
    outputs = [procs.run(*args) for args in (
        ["pause", "--url", url, "q"], ["resume", "--url", url, "q"], ["messages", "--url", url, "q", "--json"],
        ["messages", "--url", url, "q"], ["remove", "--url", url, "q", mid],
        ["pause", "--url", url.replace(PASSWORD, PASSWORD + "x"), "q"])]
    assert [r.returncode for r in outputs] == [0, 0, 0, 0, 0, 1], [r.stderr for r in outputs]
    assert all(PASSWORD not in r.stdout + r.stderr for r in outputs), [r.stderr for r in outputs]
    assert "Error: " in outputs[-1].stderr and outputs[-1].stderr.count("\n") == 1


@pytest.mark.parametrize("state", ["pending", "dead"])
def test_messages_over_1000_large_frames_reads_a_bounded_number_of_bytes(
        redis_url: str, redis_client: "redis.Redis", topology: str, state: str) -> None:
    """--limit 1000 over 1000 large frames: under the bound read, every row with its id and size, cut ones marked."""
    from tests.test_listing_bounds import BODY_BYTES, BOUND, seed, sent

    if topology == "single":
        redis_client.config_set("appendonly", "no")  # a gigabyte need not reach the disk
    expected = seed(redis_client, state, BODY_BYTES[topology])
    before = sent(redis_client, K.pending)
    rows = _listed(redis_url, state, "--limit", "1000")
    read = sent(redis_client, K.pending) - before
    assert read < BOUND, f"{read} bytes read"
    assert [(r["id"], r["size"]) for r in rows] == expected
    assert not rows[0]["cut"] and rows[-1]["cut"]
    human = procs.run("messages", "--url", redis_url, "q", "--state", state, "--limit", "1000")
    assert human.returncode == 0 and len(human.stdout.splitlines()) == 1000, human.stderr
    assert "  cut  body=xxxx" in human.stdout.splitlines()[-1]
