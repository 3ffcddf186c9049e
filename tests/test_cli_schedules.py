"""``smqsup schedules``: the real command against a real redis-server, with hostile arguments and
hostile bytes in Redis: one line and exit 2 for what is wrong, never a traceback or a secret."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from smqsup.config.schedule import ScheduleConfig
from smqsup.keys import QueueKeys
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from tests.support import procs
from tests.test_acl_tls import PASSWORD, readme_acl_words
from tests.test_cli_queue import _one_line_error
from tests.test_schedules_views import seed_hostile_schedules


def _store(url: str, *schedules: ScheduleConfig) -> None:
    broker = Broker(url)
    for s in schedules:
        broker.client.sadd("smq:queues", s.queue)
        broker.schedules.upsert(s, "sup:1:aa", 60_000)


@pytest.mark.parametrize("action", ["pause", "resume", "reset"])
@pytest.mark.parametrize("name, problem", [("a:b", "':'"), ("a{b}", "'{' or '}'"), ("x" * 10_000, "1 to 128"),
                                           ("", "1 to 128"), ("\udcff", "1 to 128"), ("..", "'.' or '..'")])
def test_a_hostile_name_is_one_line(redis_url: str, action: str, name: str, problem: str) -> None:
    """pause, resume or reset NAME with a colon, braces, 10,000 characters, empty, undecodable, '..': one
    line, exit 2."""
    _one_line_error(procs.run("schedules", "--url", redis_url, action, name), "NAME", problem)


@pytest.mark.parametrize("args, problem", [
    (["frob"], "expected one of list, pause, resume, reset, got 'frob'"), (["pause"], "give the schedule's NAME"),
    (["resume"], "give the schedule's NAME"), (["list", "tick"], "list takes no NAME"),
    (["\udcff\u202e"], "expected one of list, pause, resume, reset"), (["pause", "a", "b"], "unrecognized arguments"),
    (["reset"], "give the schedule's NAME"), (["reset", "a:b"], "':'"),
])
def test_a_hostile_action_is_one_line(redis_url: str, args: list[str], problem: str) -> None:
    """An unknown or undecodable action, a missing or extra NAME: one usage line, exit 2."""
    r = procs.run("schedules", "--url", redis_url, *args)
    _one_line_error(r, problem)
    assert "\u202e" not in r.stderr


def test_an_unknown_or_ambiguous_schedule_is_one_line(tmp_path: Path, redis_url: str) -> None:
    """A name stored nowhere, or on two queues: one line saying so; -c FILE decides between the two."""
    _store(redis_url, ScheduleConfig("tick", "a", every_ms=1000), ScheduleConfig("tick", "b", every_ms=1000))
    _one_line_error(procs.run("schedules", "--url", redis_url, "pause", "nope"), "no schedule nope in Redis")
    _one_line_error(procs.run("schedules", "--url", redis_url, "pause", "tick"), "stored on queues a, b")
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"b": {"handler": "m:f"}},
                             schedules={"tick": {"queue": "b", "every": "1s"}})
    r = procs.run("schedules", "-c", str(cfg), "pause", "tick")
    assert r.returncode == 0 and "(queue b)" in r.stdout, r.stderr
    assert Broker(redis_url).client.exists(QueueKeys("smq", "b").schedule_paused("tick"))


def test_the_listing_is_strict_json_or_one_escaped_line_each_whatever_redis_holds(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """Garbage definitions, times and flags: --json lines are strict ASCII JSON, the table one line a row."""
    seed_hostile_schedules(redis_client)
    r = procs.run("schedules", "--url", redis_url, "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line, parse_constant=lambda c: pytest.fail(c)) for line in r.stdout.splitlines()]
    assert {row["name"] for row in rows} == {"junk", "deep", "inf", "old", "big", "ok"} and r.stdout.isascii()
    r = procs.run("schedules", "--url", redis_url)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert all(line.isprintable() for line in r.stdout.splitlines())
    r = procs.run("schedules", "--url", redis_url, "pause", "ok")
    assert r.returncode == 0 and "already paused (since ? by ?)" in r.stdout, r.stdout


def test_a_configured_schedule_not_yet_stored_is_listed_as_such(tmp_path: Path, redis_url: str) -> None:
    """-c FILE: a schedule no supervisor has stored yet is a row with its reason, not a gap."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "m:f"}},
                             schedules={"tick": {"queue": "q", "cron": "0 3 * * *", "timezone": "Europe/Berlin"}})
    [row] = [json.loads(line) for line in procs.run("schedules", "-c", str(cfg), "--json").stdout.splitlines()]
    assert row["name"] == "tick" and row["error"] == "not stored in Redis yet" and row["declarers"] == 0


def test_no_redis_and_a_password_are_never_shown(redis_server: RedisServer, redis_client: "redis.Redis") -> None:
    """Nothing listening: one line, exit 1; with the README's ACL user every action works, no password shown."""
    r = procs.run("schedules", "--url", f"redis://:{PASSWORD}@127.0.0.1:1/0", timeout=30)
    _one_line_error(r, "Redis connection failed", code=1)
    assert PASSWORD not in r.stderr
    assert redis_client.execute_command(*readme_acl_words()) in (b"OK", True)
    url = f"unix://smqsup:{PASSWORD}@{redis_server.socket_path}"
    _store(url, ScheduleConfig("tick", "q", every_ms=1000))
    outputs = [procs.run("schedules", "--url", url, *args) for args in ([], ["--json"], ["pause", "tick"],
                                                                         ["resume", "tick"])]
    assert [o.returncode for o in outputs] == [0, 0, 0, 0], [o.stderr for o in outputs]
    assert all(PASSWORD not in o.stdout + o.stderr for o in outputs)
