"""JSON logs (log_format: json, --log-format json): one JSON object a line
from the supervisor and its consumers, naming the process's role, the queue
and the message a line is about, secrets masked; the formatter alone, and
real supervisors and consumers against a real redis-server."""

from __future__ import annotations

import io
import json
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from smqsup import logs, safe
from smqsup.client.producer import Producer
from tests.support import procs
from tests.support.helpers import wait_for

#: What the talk handler prints to stdout (the log file holds the processes' stdout too): no log line.
STDOUT = "stdout of the handler for "


def _lines(text: str) -> list[dict[str, Any]]:
    """Every whole line of ``text`` (a supervisor's output) as JSON, but the handler's own stdout: a line
    that is neither fails the test."""
    whole = text.splitlines(keepends=True)
    return [json.loads(line) for line in whole if line.endswith("\n") and line.strip()
            and not line.startswith(STDOUT)]


def test_a_record_is_one_json_line_with_its_context_and_no_secret() -> None:
    """A record whose arguments hold a newline, a terminal escape and a registered secret, with a traceback:
    one line of JSON, the secret masked, the traceback under "exc", role and message id from the context."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.UntrustedArguments())
    logger = logging.getLogger("test.json")
    logger.handlers[:] = [handler]
    logger.propagate = False
    safe.register_secret("hunter2-secret")
    logs.set_context(role="consumer", queue="orders")
    token = logs.MESSAGE_ID.set("m-1")
    try:
        try:
            raise ValueError("with hunter2-secret inside")
        except ValueError:
            logger.exception("value %s", "x hunter2-secret y\n\x1b[2Jforged line")
    finally:
        logs.MESSAGE_ID.reset(token)
        logs.set_context(role="test")
    [line] = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "ERROR" and record["role"] == "consumer" and record["queue"] == "orders"
    assert record["message_id"] == "m-1" and record["logger"] == "test.json"
    assert record["time"].endswith("Z") and "T" in record["time"]
    assert "hunter2-secret" not in line and "\x1b" not in record["msg"] and "\n" not in record["msg"]
    assert "ValueError" in record["exc"] and "hunter2-secret" not in record["exc"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("concurrency", [1, 4], ids=["inline", "threads"])
def test_a_supervisor_with_log_format_json_writes_json_lines_naming_roles_queues_and_messages(
        concurrency: int, supervise: Callable[..., procs.Supervisor], producer: Producer) -> None:
    """log_format: json: every line the supervisor and its consumers write is JSON; the supervisor's say
    role supervisor, a consumer's role consumer and its queue; a handler's own line (inline, and in a
    handler thread) and smqsup's line about a failed attempt name the message."""
    s = supervise({"talk": {"handler": "tests.support.handlers:talk", "concurrency": concurrency},
                   "fail": {"handler": "tests.support.handlers:fail", "retry_threshold": 1}}, log_format="json")
    talked = producer.publish("talk", {"n": 1})
    failed = producer.publish("fail", {"n": 2})

    def about(mid: str, queue: str) -> list[dict[str, Any]]:
        return [r for r in _lines(s.log()) if r.get("message_id") == mid and r.get("queue") == queue]
    def said() -> bool:
        return (any(r["logger"] == "tests.support.handlers" for r in about(talked, "talk"))
                and any("failed on attempt 1" in r["msg"] for r in about(failed, "fail")))
    # Waits for the very lines asserted below (any line about the message was a race: another line about
    # the failed message could come first, and the SIGTERM then stopped it before its attempt's line).
    wait_for(said, timeout_s=20, message=f"no JSON lines about the messages in:\n{s.log()[-2000:]}")
    s.signal(signal.SIGTERM)
    s.proc.wait(30)
    records = _lines(s.log())
    assert {r["role"] for r in records} == {"supervisor", "consumer"}
    assert all(r["role"] == "supervisor" for r in records if "queue" not in r)
    [own] = [r for r in about(talked, "talk") if r["logger"] == "tests.support.handlers"]
    assert own["msg"] == f"handling {talked}" and own["level"] == "WARNING"
    assert any("failed on attempt 1" in r["msg"] for r in about(failed, "fail"))


def test_the_flag_wins_over_the_file_and_a_bad_log_format_is_one_line(tmp_path: Path, redis_url: str) -> None:
    """--log-format json on a file saying text: JSON lines; log_format: xml and a huge value: one line naming
    the key, exit 2; --log-format yaml: refused by the command line."""
    cfg = tmp_path / "q.yaml"
    procs.write_config(cfg, redis_url, {"q": {"handler": "tests.support.handlers:record"}}, log_format="text")
    r = procs.run("--log-format", "json", "consume", "-c", str(cfg), "nosuchqueue")
    assert r.returncode == 2 and "no such queue" in r.stderr  # (an error for people stays a line of text)
    for bad in ("xml", "j" * 10_000, 5, None):
        procs.write_config(cfg, redis_url, {"q": {"handler": "tests.support.handlers:record"}}, log_format=bad)
        r = procs.run("check", "-c", str(cfg))
        assert r.returncode == 2, r.stderr
        [line] = r.stderr.splitlines()
        said = "a value is required" if bad is None else "expected one of text, json"
        assert "q.yaml: log_format: " in line and said in line and len(line) < 400, line
    r = procs.run("--log-format", "yaml", "check", "-c", str(cfg))
    assert r.returncode == 2 and "--log-format" in r.stderr
