"""The tools stay useful on whatever sits in Redis and never show a secret:
`dlq`, `status`, `check`, the supervisor's log and the process titles."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import redis

from smqsup import framing, message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.launch.discovery import free_port
from smqsup.launch.process import RedisServer
from tests.support import procs
from tests.support.helpers import wait_for

Q = QueueKeys("smq", "q")
PASSWORD = "s3cret-Pa55word"


def _dead(raw: bytes, reason: str = "ValueError: x") -> bytes:
    return json.dumps({"reason": reason, "at_ms": 1_700_000_000_000}).encode() + b"\n" + raw


#: Dead-letter entries no tool may choke on.
HOSTILE_DEAD = [
    _dead(b'0|{"id":"surrogate","queue":"q","body":"\\udcff\\u001b[2J","created_at":1,"headers":{}}'),
    _dead(b'0|{"id":"deep","queue":"q","body":' + b"[" * 5000 + b"]" * 5000 + b',"created_at":1,"headers":{}}'),
    _dead(b'0|{"id":"nan","queue":"q","body":NaN,"created_at":1,"headers":{}}'),
    _dead(b"\xff\xfe not a frame\n\x1b[31m"),
    b"no metadata line at all",
    b'{"at_ms":1e400,"reason":["x"]}\n0|{}',
    b"[" * 5000 + b"\n0|[]",
]


def test_dlq_lists_and_acts_on_every_hostile_entry(redis_url: str, redis_client: "redis.Redis") -> None:
    """Surrogates, deep bodies, NaN, undecodable bytes: listed (escaped), and requeued or purged by id."""
    for entry in HOSTILE_DEAD:
        redis_client.lpush(Q.dead, entry)
    r = procs.run("dlq", "--url", redis_url, "list", "q")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(HOSTILE_DEAD) and "\x1b" not in r.stdout
    r = procs.run("dlq", "--url", redis_url, "list", "q", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line, parse_constant=_no_constant) for line in r.stdout.splitlines()]
    ids = [row["id"] for row in rows]
    assert {"surrogate", "deep", "nan"} <= set(ids) and all(ids)
    # The deep entry is named by the id at its start; bytes without one by their raw- reference.
    r = procs.run("dlq", "--url", redis_url, "requeue", "q", "--id", "deep")
    assert r.returncode == 0 and "requeued 1" in r.stdout, r.stderr
    raw_ref = next(i for i in ids if i.startswith("raw-"))
    r = procs.run("dlq", "--url", redis_url, "purge", "q", "--id", raw_ref, "--id", "nan")
    assert r.returncode == 0 and "purged 2" in r.stdout, r.stderr
    assert redis_client.llen(Q.dead) == len(HOSTILE_DEAD) - 3
    assert framing.peek_id(redis_client.lindex(Q.pending, 0)) == "deep"


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} in JSON output")


def test_status_survives_garbage_in_every_key(redis_url: str, redis_client: "redis.Redis") -> None:
    """Registry, slots, counters, collector facts, history and producers holding garbage: status still prints."""
    redis_client.sadd("smq:queues", "q", "\udcff".encode("utf-8", "surrogatepass"))
    redis_client.hset(Q.consumers, mapping={"a": b"\xff", "b": b"[" * 5000, "c": b'{"pid":"x","rss":NaN}',
                                            "d": b'{"host":"\\u001b[2Jh","index":1e400}'})
    redis_client.zadd(Q.heartbeats, {"a": 1, "b": 2})
    redis_client.hset(Q.slots, mapping={"h:#1": b'{"restarts":3}', "h:#2": b"garbage", "h:#3": b'{"restarts":"x"}'})
    redis_client.hset(Q.counters, mapping={"acked": b"lots", "published": b"7"})
    redis_client.hset(Q.gc, mapping={"reclaimed": b"\xff"})
    redis_client.lpush(Q.series, b"not json", b'{"t":"x","acked":NaN}', b"[" * 5000)
    redis_client.set(Q.gc_lock, b"\xff\xfe")
    redis_client.hset("smq:{smq}:producers", mapping={"p": b"{}", "q": b"\xff"})
    redis_client.hset("{smq}:producers", mapping={"p": b'{"seen_at_ms":"x"}'})
    for args in (["status", "--url", redis_url], ["status", "--url", redis_url, "--json"]):
        r = procs.run(*args)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr and "\x1b" not in r.stdout
    json.loads(r.stdout, parse_constant=_no_constant)


def test_check_fails_for_a_module_that_ends_the_process_on_import(tmp_path: Path, redis_url: str) -> None:
    """`smqsup check` is not fooled by os._exit(0) at import, and KeyboardInterrupt there is one line."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.exit_at_import:handle"}})
    r = procs.run("check", "-c", str(cfg))
    assert r.returncode == 2 and "ok" not in r.stdout, (r.stdout, r.stderr)
    assert "ended the checking process" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.interrupt_at_import:handle"}})
    r = procs.run("check", "-c", str(cfg))
    assert r.returncode == 2, (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert "KeyboardInterrupt" in line and "queues.q.handler" in line


@pytest.fixture
def password_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server on a TCP port that requires PASSWORD; yields its url with the password."""
    port = free_port()
    server = RedisServer(tmp_path_factory.mktemp("pwredis"), port=port)
    server.start()
    client = redis.Redis.from_url(server.url)
    client.config_set("requirepass", PASSWORD)
    client.close()
    try:
        yield f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    finally:
        server.kill()  # the test is over: nothing reads its data


def test_the_password_shows_nowhere(password_redis: str, tmp_path: Path,
                                    supervise: Callable[..., procs.Supervisor]) -> None:
    """Start line, errors, status output and process titles mask the Redis password."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, url=password_redis)
    wait_for(lambda: "all consumers ready" in sup.log(), 20)
    with Producer(password_redis) as producer:
        producer.publish("q", 1)
    assert PASSWORD not in sup.log() and ":***@127.0.0.1" in sup.log()
    bad = password_redis.replace("/0", "/0?socket_timeout=abc")
    for args in (["status", "--url", bad], ["status", "--url", password_redis.replace(PASSWORD, PASSWORD + "x")],
                 ["publish", "--url", bad, "q", "1"], ["dlq", "--url", bad, "list", "q"]):
        r = procs.run(*args)
        assert r.returncode != 0 and PASSWORD not in r.stdout + r.stderr, (args, r.stderr)
    watch = subprocess.Popen([sys.executable, "-m", "smqsup", "status", "--watch", "1", "--url", password_redis],
                             env=procs.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        title = wait_for(lambda: _title_if_set(watch.pid), 10, message="status --watch never set its title")
        assert PASSWORD not in title and title.startswith("smqsup: status")
    finally:
        watch.terminate()
        watch.wait(10)
    for child in sup.children() + [psutil.Process(sup.pid)]:
        assert PASSWORD not in " ".join(child.cmdline())


def _title_if_set(pid: int) -> str:
    title = " ".join(psutil.Process(pid).cmdline())
    return title if title.startswith("smqsup:") else ""


def test_the_url_can_come_from_the_environment(password_redis: str, redis_client: "redis.Redis") -> None:
    """$SMQSUP_REDIS_URL stands in for --url, keeping the password off the command line."""
    r = procs.run("publish", "q", '"hi"', env=procs.env(SMQSUP_REDIS_URL=password_redis))
    assert r.returncode == 0, r.stderr
    client = redis.Redis.from_url(password_redis)
    assert message.decode(client.lindex(Q.pending, 0)).body == "hi"
    client.close()


def test_a_standalone_consumer_reports_its_counts_like_a_supervised_one(
        tmp_path: Path, redis_url: str, out_dir: Path) -> None:
    """`smqsup consume` heartbeats carry `received` and `acked`, which status shows."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:record"}},
                             heartbeat_interval="200ms", heartbeat_timeout="2s")
    with Producer(redis_url) as producer:
        producer.publish_many("q", range(5))
    proc = procs.smqsup("consume", "-c", str(cfg), "q", out_dir=out_dir, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    try:
        def consumer() -> dict[str, object]:
            snap = json.loads(procs.run("status", "--url", redis_url, "--json").stdout)
            rows = snap["queues"]["q"]["consumers"]
            return rows[0] if rows and rows[0].get("acked") == 5 else {}

        row = wait_for(consumer, 15, interval_s=0.2, message="standalone consumer's counts never showed")
        assert row["received"] == 5 and row["pid"] == proc.pid
    finally:
        procs.stop(proc)


@pytest.mark.parametrize("query", ["socket_connect_timeout=1e999", "socket_timeout=nan", "socket_timeout=-1",
                                   "socket_timeout=abc", "max_connections=-1", "ssl_cert_reqs=bogus",
                                   "no_such_option=1"])
def test_a_bad_url_option_is_one_line_without_the_password(query: str) -> None:
    """Url options redis-py would choke on later are one-line errors, exit 2, password masked."""
    scheme = "rediss" if query.startswith("ssl") else "redis"
    r = procs.run("status", "--url", f"{scheme}://:{PASSWORD}@127.0.0.1:1/0?{query}")
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("Error: redis.url: ") and PASSWORD not in line and ":***@" in line


@pytest.mark.parametrize("args", [["status", "--watch", "nan"], ["status", "--watch", "-1"],
                                  ["status", "--watch", "1e999"], ["dlq", "list", "q", "--limit", "0"],
                                  ["dlq", "list", "q", "--limit", "²"], ["dlq", "list", "q", "--limit", "9" * 5000]])
def test_hostile_numbers_on_the_command_line_are_one_line(args: list[str], redis_url: str) -> None:
    """Absurd numeric flags are usage errors (exit 2, one line), never a traceback."""
    r = procs.run(args[0], "--url", redis_url, *args[1:])
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_hostile_url_from_the_environment_is_one_line_without_the_password() -> None:
    """$SMQSUP_REDIS_URL holding an absurd option or no url at all: one line, exit 2, password masked."""
    for value in (f"redis://:{PASSWORD}@127.0.0.1:1/0?socket_timeout=nan", f"ftp://:{PASSWORD}@h/0", "\x1b[2J"):
        r = procs.run("status", env=procs.env(SMQSUP_REDIS_URL=value))
        assert r.returncode == 2, (value, r.stderr)
        [line] = r.stderr.strip().splitlines()
        assert PASSWORD not in line and "\x1b" not in line, line


def test_dlq_ids_that_name_nothing_act_on_nothing(redis_url: str, redis_client: "redis.Redis") -> None:
    """--id values that are huge, multi-line or forged raw- references requeue and purge nothing."""
    for entry in HOSTILE_DEAD:
        redis_client.lpush(Q.dead, entry)
    for action in ("requeue", "purge"):
        r = procs.run("dlq", "--url", redis_url, action, "q", "--id", "x" * 100_000, "--id", "a\nb",
                      "--id", "raw-0000000000000000")
        assert r.returncode == 0 and f"{action}d 0" in r.stdout, r.stderr
    assert redis_client.llen(Q.dead) == len(HOSTILE_DEAD)
