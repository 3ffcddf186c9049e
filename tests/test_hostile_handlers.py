"""Handlers that misbehave where the consumer draws their verdict: a Retry
that is not one, a generator, an exception carrying secrets. Whatever a
handler raises or returns, its message is settled (never left in the
consumer's list) and no secret reaches a dead letter."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup import Retry, deadletter, framing, message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.inproc import NS, Running
from tests.support.topology import free_ports

K = QueueKeys(NS, "q")


class SkipsInit(Retry):
    """A Retry subclass whose __init__ never calls Retry's: no delay_s at all."""

    def __init__(self, text: str) -> None:  # noqa: D107 - deliberately broken
        Exception.__init__(self, text)


def _retry_with(delay: object) -> Retry:
    r = Retry(delay=1)
    r.delay_s = delay  # type: ignore[assignment] - what a handler may do afterwards
    return r


_BAD_RETRIES: dict[str, Callable[[], BaseException]] = {
    "skips-init": lambda: SkipsInit("no delay here"),
    "nan": lambda: _retry_with(math.nan),
    "inf": lambda: _retry_with(math.inf),
    "negative": lambda: _retry_with(-5),
    "text": lambda: _retry_with("soon"),
    "huge": lambda: _retry_with(1e300),
}


def _gen(msg: Any) -> Any:
    yield msg


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_retry_that_is_no_retry_is_a_failed_attempt_never_a_stranded_message(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, concurrency: int) -> None:
    """Retry subclasses without Retry's __init__, or with delay_s NaN, inf, negative, text or huge: each
    message costs its attempt and is dead-lettered at retry_threshold 0; nothing stays in the list."""
    def handle(msg: Any) -> None:
        raise _BAD_RETRIES[msg.body]()
    r = start(handle, concurrency=concurrency, retry_threshold=0)
    producer.publish_many("q", list(_BAD_RETRIES))
    wait_for(lambda: redis_client.llen(K.dead) == len(_BAD_RETRIES), timeout_s=10)
    assert redis_client.llen(K.processing(r.consumer.consumer_id)) == 0
    assert redis_client.llen(K.pending) == 0 and redis_client.zcard(K.delayed) == 0
    bodies = sorted(message.decode(deadletter.DeadLetter(e).frame).body for e in redis_client.lrange(K.dead, 0, -1))
    assert bodies == sorted(_BAD_RETRIES)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_bad_retry_delay_falls_back_to_the_queue_retry_delay(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, concurrency: int) -> None:
    """A Retry whose delay_s is NaN is retried after the queue's retry_delay, and then handled."""
    seen: list[int] = []

    def handle(msg: Any) -> None:
        seen.append(msg.attempts)
        if msg.attempts == 0:
            raise _retry_with(math.nan)
    start(handle, concurrency=concurrency, retry_threshold=3, retry_delay_s=0.2)
    producer.publish("q", "x")
    wait_for(lambda: redis_client.hget(K.counters, "acked") == b"1", timeout_s=10)
    assert seen == [0, 1]


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_handler_that_returns_a_generator_fails_its_attempt(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis, concurrency: int) -> None:
    """A plain function returning a generator (its body never ran) is a failed attempt, said in the reason."""
    def handle(msg: Any) -> Any:
        return _gen(msg)
    start(handle, concurrency=concurrency, retry_threshold=0)
    producer.publish("q", "x")
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=10)
    reason = deadletter.DeadLetter(redis_client.lindex(K.dead, 0) or b"").reason
    assert reason.startswith("TypeError: the handler returned generator") and "not yield" in reason
    assert redis_client.hget(K.counters, "acked") in (None, b"0")


@pytest.fixture
def generators(tmp_path: Path) -> Path:
    """A project directory with a module of generator handlers and a config naming each."""
    (tmp_path / "smqt_gens.py").write_text(
        "def plain(message):\n    yield message\n\n"
        "async def agen(message):\n    yield message\n\n"
        "class Caller:\n    def __call__(self, message):\n        yield message\n\n"
        "obj = Caller()\n")
    return tmp_path


@pytest.mark.parametrize(("spec", "kind"), [("smqt_gens:plain", "a generator function"),
                                            ("smqt_gens:agen", "an async generator function"),
                                            ("smqt_gens:obj", "a generator function")])
def test_check_refuses_a_generator_handler_in_one_line(generators: Path, spec: str, kind: str) -> None:
    """smqsup check names a generator handler (def, async def, or an object's __call__) and exits 2."""
    cfg = procs.write_config(generators / "queues.yaml", "redis://127.0.0.1:1/0", {"q": {"handler": spec}})
    done = subprocess.run([sys.executable, "-m", "smqsup", "check", "-c", str(cfg)], cwd=generators,
                          env=procs.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"queues.q.handler: {kind}" in lines[0] and "yield" in lines[0], lines
    assert "Traceback" not in done.stderr


def test_a_supervisor_does_not_start_a_generator_handler(supervise: Callable[..., procs.Supervisor],
                                                         generators: Path) -> None:
    """The same refusal at start: the queue's consumers fail to import (FATAL), said in one line each."""
    s = supervise({"q": {"handler": "smqt_gens:plain"}},
                  extra_env={"PYTHONPATH": f"{generators}{os.pathsep}{procs.REPO}"})
    wait_for(lambda: "a generator function (it uses yield)" in s.log(), timeout_s=20)
    assert "Traceback" not in s.log()


def test_no_secret_reaches_a_dead_letter(supervise: Callable[..., procs.Supervisor], redis_client: redis.Redis,
                                         producer: Producer) -> None:
    """An exception text and traceback holding a Redis url's password and the web token (which consumers
    learn from the config) are stored masked, in the reason, the error and the traceback alike."""
    token = "tok-Zq81-never-shown"
    s = supervise({"q": {"handler": "tests.support.handlers:leak_secrets", "retry_threshold": 0}},
                  web={"listen": f"127.0.0.1:{free_ports(1)[0]}", "token": token},
                  extra_env={"LEAK_TOKEN": token, "LEAK_PASSWORD": "pw-Kx77-never-shown"})
    producer.publish("q", "x")
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=20)
    entry = redis_client.lindex(K.dead, 0) or b""
    meta = deadletter.DeadLetter(entry).meta
    stored = entry.decode("utf-8", "replace")
    assert "never-shown" not in stored, stored
    assert "***" in meta["reason"] and "***" in meta["error"] and "***" in meta["traceback"]
    assert "never-shown" not in s.log()


def test_a_secret_already_stored_in_a_dead_letter_is_masked_when_shown(redis_url: str,
                                                                         redis_client: redis.Redis) -> None:
    """A dead letter written before reasons were masked (or by hand) shows a url's password as *** in
    `smqsup dlq list`, as text and as JSON."""
    frame = framing.frame(message.encode_payload("q", "x", max_size_bytes=1 << 20)[1])
    redis_client.lpush(K.dead, b'{"reason":"cannot reach redis://app:pw-Lq55-stored@db:6379/0"}\n' + frame)
    for extra in ([], ["--json"]):
        done = procs.run("dlq", "list", "q", "--url", redis_url, *extra)
        assert done.returncode == 0, done.stderr
        assert "pw-Lq55-stored" not in done.stdout and "redis://app:***@db:6379/0" in done.stdout, done.stdout


class _Unprintable(BaseException):
    """Not an Exception, and its text cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_base_exception_whose_text_raises_is_a_failed_attempt_with_many_in_flight(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """concurrency 4: a handler raising a BaseException (not an Exception) whose __str__ raises costs its
    attempt and is dead-lettered at retry_threshold 0; the other messages run and nothing stays in the list."""
    def handle(msg: Any) -> None:
        if msg.body == "bad":
            raise _Unprintable()
    r = start(handle, concurrency=4, retry_threshold=0)
    producer.publish_many("q", ["bad", 1, 2, 3])
    wait_for(lambda: redis_client.llen(K.dead) == 1 and redis_client.hget(K.counters, "acked") == b"3", timeout_s=10)
    assert deadletter.DeadLetter(redis_client.lindex(K.dead, 0) or b"").reason.startswith(
        "RuntimeError: the handler raised _Unprintable: <_Unprintable: str() failed>")
    assert redis_client.llen(K.processing(r.consumer.consumer_id)) == 0
