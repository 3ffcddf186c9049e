"""The ``smqsup`` command line: publish, dlq, consume on an embedded server, one-line errors."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import redis

from smqsup.keys import QueueKeys
from smqsup.redis_server import running_url
from tests import procs
from tests.helpers import wait_for

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
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.handlers:record"}})
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
    from smqsup.broker import Broker
    from smqsup.producer import Producer

    with Producer(redis_url) as p:
        ids = p.publish_many("q", ["a", "b", "<img src=x onerror=alert(1)>"])
    broker = Broker(redis_url)
    for i in range(3):
        frame, _ = broker.fetch("q", "c", 1)
        assert frame is not None
        broker.nack("q", "c", frame, retry_threshold=-1, delay_ms=0, meta='{"reason":"ValueError: bad %d"}' % i,
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
    cfg = procs.write_config(tmp_path / "q.yaml", None, {"q": {"handler": "tests.handlers:record"}},
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
