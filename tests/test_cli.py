"""The ``smqsup`` command line: publish, dlq, consume on an embedded server, one-line errors."""

from __future__ import annotations

import io
import json
import signal
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup.cli import main as cli
from smqsup.cli import publish_cmd as cli_publish
from smqsup.client.producer import Producer
from smqsup.errors import UsageError
from smqsup.keys import QueueKeys
from smqsup.launch.discovery import running_url
from tests.support import procs
from tests.support.helpers import wait_for

K = QueueKeys("smq", "q")


def test_publish_prints_the_id_and_queues_the_message(tmp_path: Path, redis_url: str,
                                                      redis_client: "redis.Redis") -> None:
    """`smqsup publish --url URL QUEUE JSON` queues one message and prints its id."""
    r = procs.run("publish", "--url", redis_url, "q", '{"order": 7}', "--header", "trace=abc")
    assert r.returncode == 0, r.stderr
    [frame] = redis_client.lrange(K.pending, 0, -1)
    env = json.loads(frame.split(b"|", 1)[1])
    assert env["id"] == r.stdout.strip() and env["body"] == {"order": 7} and env["headers"] == {"trace": "abc"}


def test_publish_from_stdin_lines(redis_url: str, redis_client: "redis.Redis") -> None:
    """`smqsup publish ... QUEUE -` publishes one message per stdin line."""
    r = procs.run("publish", "--url", redis_url, "q", "-", input='1\n"two"\n[3]\n')
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) == 3 and redis_client.llen(K.pending) == 3


# --- publish flags ------------------------------------------------------------------------


class RecordingProducer:
    """Stands in for Producer: records each publish call and returns made-up ids."""

    calls: list[tuple[str, Any, dict[str, Any]]] = []

    def __init__(self, url: str, namespace: str, *, max_message_size: int, wait_replicas: int,
                 wait_timeout: float) -> None:
        pass

    def __enter__(self) -> "RecordingProducer":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def publish(self, queue: str, body: Any, headers: Any = None, **options: Any) -> str:
        self.calls.append(("publish", body, {"headers": headers, **options}))
        return f"id{len(self.calls)}"

    def publish_many(self, queue: str, bodies: list[Any], headers: Any = None, **options: Any) -> list[str]:
        self.calls.append(("publish_many", bodies, {"headers": headers, **options}))
        return [f"id{n}" for n, _ in enumerate(bodies)]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, dict[str, Any]]]:
    monkeypatch.setattr("smqsup.client.producer.Producer", RecordingProducer)
    monkeypatch.setattr(RecordingProducer, "calls", [])
    return RecordingProducer.calls


def publish_with(*argv: str) -> int:
    """`smqsup publish ARGV` run in this process, up to the (recording) producer."""
    return cli_publish.cmd_publish(cli.build_parser().parse_args(["publish", *argv]))


def test_publish_flags_become_producer_keywords(recorded: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    """Each flag reaches Producer.publish coerced: seconds, an aware datetime, an int, the key."""
    assert publish_with("--url", "redis://h", "q", '{"a": 1}', "--delay", "1.5m", "--priority", "7",
                        "--dedup", "order-7", "--dedup-ttl", "2h", "--ttl", "500ms") == 0
    assert recorded == [("publish", {"a": 1}, {"headers": None, "delay": 90.0, "priority": 7,
                                               "dedup_key": "order-7", "dedup_ttl": 7200.0, "ttl": 0.5})]
    assert capsys.readouterr().out == "id1\n"
    publish_with("--url", "redis://h", "q", "1", "--at", "2026-12-24T19:00:00+01:00")
    publish_with("--url", "redis://h", "q", "1", "--at", "1798135200.25")
    [at_iso, at_epoch] = [options["at"] for _, _, options in recorded[1:]]
    assert at_iso == datetime(2026, 12, 24, 18, tzinfo=timezone.utc) and at_iso.utcoffset() == timedelta(hours=1)
    assert at_epoch == 1798135200.25


def test_publish_without_flags_passes_no_new_keyword(recorded: list[Any]) -> None:
    """A plain publish calls Producer.publish exactly as before the flags existed."""
    publish_with("--url", "redis://h", "q", "1", "--header", "k=v")
    assert recorded == [("publish", 1, {"headers": {"k": "v"}})]


def test_stdin_lines_all_get_the_flags(recorded: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """With '-', publish_many gets every line and the same keywords for all of them."""
    monkeypatch.setattr("sys.stdin", io.StringIO('1\n\n"two"\n'))
    publish_with("--url", "redis://h", "q", "-", "--priority", "0", "--delay", "0")
    assert recorded == [("publish_many", [1, "two"], {"headers": None, "priority": 0, "delay": 0.0})]


def test_dedup_ttl_comes_from_the_queue_in_the_config(tmp_path: Path, recorded: list[Any]) -> None:
    """With -c FILE, --dedup without --dedup-ttl holds the key for the queue's dedup_ttl; --dedup-ttl wins."""
    cfg = procs.write_config(tmp_path / "q.yaml", "redis://h", {"q": {"handler": "m:f", "dedup_ttl": "1h"}},
                             defaults={"dedup_ttl": "3d"})
    publish_with("-c", str(cfg), "q", "1", "--dedup", "k")
    publish_with("-c", str(cfg), "q", "1", "--dedup", "k", "--dedup-ttl", "5s")
    publish_with("-c", str(cfg), "other", "1", "--dedup", "k")  # not in the file: the Producer's default
    publish_with("-c", str(cfg), "q", "1")
    assert [options.get("dedup_ttl") for _, _, options in recorded] == [3600.0, 5.0, None, None]


def test_dedup_ttl_without_dedup_is_a_usage_error(recorded: list[Any]) -> None:
    """--dedup-ttl alone is refused before anything is read or sent."""
    with pytest.raises(UsageError, match=r"^smqsup publish: --dedup-ttl needs --dedup KEY$"):
        publish_with("-c", "/nonexistent/queues.yaml", "q", "1", "--dedup-ttl", "1h")
    assert recorded == []


@pytest.mark.parametrize("args,expect", [
    (["--delay", "5x"], "argument --delay: expected a duration like 500ms, 5s, 2m or 1h, got '5x'"),
    (["--delay=-5s"], "argument --delay: a duration must not be negative, got '-5s'"),
    (["--at", "2026-12-24T18:00:00"], "argument --at: give a timezone (Z or +HH:MM), got '2026-12-24T18:00:00'"),
    (["--delay", "1s", "--at", "1798135200"], "argument --at: not allowed with argument --delay"),
    (["--priority", "10"], "argument --priority: expected an integer from 0 to 9, got '10'"),
    (["--dedup", ""], "argument --dedup: expected a key, got an empty string"),
    (["--dedup", "k", "--dedup-ttl", "0"], "argument --dedup-ttl: expected a duration greater than 0, got '0'"),
    (["--ttl", "nan"], "argument --ttl: expected a duration like 500ms, 5s, 2m or 1h, got 'nan'"),
    (["--dedup-ttl", "1h"], "smqsup publish: --dedup-ttl needs --dedup KEY"),
])
def test_a_bad_publish_flag_is_one_line_with_exit_2(args: list[str], expect: str) -> None:
    """The real command: a bad flag value is one line naming the flag and the value, exit 2."""
    r = procs.run("publish", "--url", "redis://127.0.0.1:1", "q", "1", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.splitlines() == [f"Error: smqsup publish: {expect}" if "argument" in expect
                                     else f"Error: {expect}"]


def test_publish_flags_end_to_end(redis_url: str, redis_client: "redis.Redis") -> None:
    """--delay lands in scheduled, --priority in the priority set, a repeated --dedup queues one message."""
    def publish(*args: str, **kw: Any) -> str:
        r = procs.run("publish", "--url", redis_url, "q", *args, **kw)
        assert r.returncode == 0, r.stderr
        return r.stdout

    publish("1", "--delay", "1h")
    assert redis_client.zcard(K.scheduled) == 1
    publish("-", "--priority", "5", input="1\n2\n")
    # Into an empty queue a batch goes to the pending list (so that blocked consumers wake), then the set.
    assert redis_client.llen(K.pending) + redis_client.zcard(K.priority) == 2
    publish("3", "--priority", "5")
    assert redis_client.zcard(K.priority) >= 1
    first = publish("1", "--dedup", "order-7")
    assert publish("1", "--dedup", "order-7", "--ttl", "1h") == first
    assert redis_client.llen(K.pending) + redis_client.zcard(K.priority) == 4


@pytest.mark.parametrize("args,expect", [
    (["publish", "--url", "redis://x", "q", "{bad"], "not valid JSON"),
    (["publish", "--url", "redis://x", "a{b}", "1"], "queue"),
    (["publish", "--url", "ftp://x", "q", "1"], "redis.url"),
    (["publish", "q", "1"], "-c FILE"),
    (["consume", "-c", "/nonexistent/queues.yaml", "q"], "/nonexistent/queues.yaml"),
    (["dlq", "--url", "redis://x", "explode", "q"], "invalid choice"),
    ([], "give -c FILE"),
])
def test_usage_errors_are_one_line_with_exit_2(args: list[str], expect: str) -> None:
    """Bad arguments print one line naming the problem and exit 2, without a traceback."""
    r = procs.run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_consume_unknown_queue_names_the_key(tmp_path: Path, redis_url: str) -> None:
    """Consuming a queue the config lacks names file and key path."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:record"}})
    r = procs.run("consume", "-c", str(cfg), "nope")
    assert r.returncode == 2 and f"{cfg}: queues.nope:" in r.stderr


def test_consume_bad_handler_is_one_line(tmp_path: Path, redis_url: str) -> None:
    """A handler module that does not exist is one line naming the key path, exit 2."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "no_such_mod:handle"}})
    r = procs.run("consume", "-c", str(cfg), "q")
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert "queues.q.handler" in line and "no_such_mod" in line


def test_dlq_list_requeue_purge(tmp_path: Path, redis_url: str, redis_client: "redis.Redis") -> None:
    """Dead letters are listed with reason, requeued (attempts reset) by id, and purged."""
    from smqsup.store.broker import Broker

    with Producer(redis_url) as p:
        ids = p.publish_many("q", ["a", "b", "<img src=x onerror=alert(1)>"])
    broker = Broker(redis_url)
    for i in range(3):
        frame, _ = broker.messages.fetch("q", "c", 1)
        assert frame is not None
        broker.messages.nack("q", "c", frame, retry_threshold=-1, delay_ms=0, meta='{"reason":"ValueError: bad %d"}' % i,
                             fetch_next=False)
    r = procs.run("dlq", "--url", redis_url, "list", "q", "--json")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert {row["id"] for row in rows} == set(ids)
    assert {row["reason"] for row in rows} == {"ValueError: bad 0", "ValueError: bad 1", "ValueError: bad 2"}
    assert all(row["attempts"] == 1 for row in rows)

    r = procs.run("dlq", "--url", redis_url, "requeue", "q", "--id", ids[1])
    assert r.returncode == 0 and "requeued 1" in r.stdout, r.stderr
    [frame] = redis_client.lrange(K.pending, 0, -1)
    assert frame.startswith(b"0|") and json.loads(frame[2:])["id"] == ids[1]

    assert redis_client.hget(K.counters, "dlq_requeued") == b"1"

    r = procs.run("dlq", "--url", redis_url, "purge", "q")
    assert r.returncode == 0 and "purged 2" in r.stdout
    assert redis_client.llen(K.dead) == 0


def test_embedded_redis_started_by_consume_is_reached_by_publish(tmp_path: Path) -> None:
    """With no redis.url, `consume` owns an embedded server; `publish -c` reaches it; it stops with consume."""
    out = tmp_path / "out"
    out.mkdir()
    cfg = procs.write_config(tmp_path / "q.yaml", None, {"q": {"handler": "tests.support.handlers:record"}},
                             redis={"data_dir": str(tmp_path / "data"), "appendfsync": "always"})
    # Nothing runs yet: publish says so in one line.
    r = procs.run("publish", "-c", str(cfg), "q", "1")
    assert r.returncode == 2 and "no embedded redis-server is running" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    proc = procs.smqsup("consume", "-c", str(cfg), "q", out_dir=out, stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: running_url(tmp_path / "data"), message="embedded server did not start")
        r = procs.run("publish", "-c", str(cfg), "q", '{"hello": "world"}')
        assert r.returncode == 0, r.stderr
        wait_for(lambda: any(f.stat().st_size for f in out.iterdir()), message="message not handled")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    assert running_url(tmp_path / "data") is None
    assert (tmp_path / "data").is_dir()
