"""Hostile command lines, files, environments and Producer arguments: each is
one line naming what is wrong (exit 2), never a hang, a traceback or a secret."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from smqsup import safe
from smqsup.cli import publish_cmd as cli_publish
from smqsup.client.producer import Producer
from smqsup.errors import ConfigError, MessageError
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.helpers import client_for, wait_for


def _one_line_error(r: "subprocess.CompletedProcess[str]", *parts: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: "), r.stderr
    assert "Traceback" not in r.stderr
    for part in parts:
        assert part in r.stderr, r.stderr


# --- files that are not files ------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A FIFO nobody writes to: reading it would block for ever."""
    path = tmp_path / "queues.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [["check"], ["status"], ["publish", "q", "{}"], ["consume", "q"], []])
def test_a_fifo_as_config_is_refused_without_hanging(fifo: Path, command: list[str]) -> None:
    """-c FIFO: one line saying it is not a regular file, for every command and the supervisor."""
    args = [*command[:1], "-c", str(fifo), *command[1:]]
    _one_line_error(procs.run(*args, timeout=20), "not a regular file (a FIFO)")


def test_a_device_as_config_is_refused() -> None:
    """-c /dev/zero: not a regular file (a character device), not read at all."""
    _one_line_error(procs.run("check", "-c", "/dev/zero", timeout=20), "/dev/zero: not a regular file")


def test_a_fifo_as_token_file_is_refused_without_hanging(fifo: Path, redis_url: str) -> None:
    """web --token-file FIFO: one line, before anything listens."""
    r = procs.run("web", "--url", redis_url, "--listen", "127.0.0.1:0", "--token-file", str(fifo), timeout=20)
    _one_line_error(r, "--token-file", "not a regular file (a FIFO)")


def test_a_supervisor_reloading_a_config_replaced_by_a_fifo_keeps_running(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket) -> None:
    """SIGHUP after queues.yaml became a FIFO: the reload fails in one log line, the loop goes on."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record"}}, notify)
    notify.wait("READY=1")
    sup.cfg.unlink()
    os.mkfifo(sup.cfg)
    sup.signal(signal.SIGHUP)
    wait_for(lambda: "not a regular file (a FIFO)" in sup.log(), message="reload stuck on the FIFO")
    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(30) == 0


# --- the embedded server's data directory --------------------------------------------------


def _embedded_config(tmp_path: Path, data_dir: str) -> Path:
    return procs.write_config(tmp_path / "queues.yaml", None, {"q": {"handler": "tests.support.handlers:record"}},
                              redis={"data_dir": data_dir})


@pytest.mark.parametrize("where", ["a file", "under a file", "under /proc"])
@pytest.mark.parametrize("command", [[], ["consume", "q"]])
def test_an_unusable_data_dir_is_one_line(tmp_path: Path, where: str, command: list[str]) -> None:
    """redis.data_dir naming a file, a path under a file, or an uncreatable path: one line, exit 2."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    data_dir = {"a file": str(a_file), "under a file": str(a_file / "sub"),
                "under /proc": "/proc/smqsup-no-such-dir"}[where]
    cfg = _embedded_config(tmp_path, data_dir)
    args = [*command[:1], "-c", str(cfg), *command[1:]]
    _one_line_error(procs.run(*args, timeout=30), data_dir, "cannot use it as the data directory")


def test_a_second_supervisor_on_one_data_dir_is_refused(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, tmp_path: Path) -> None:
    """Two supervisors, one embedded data dir: the second refuses to start (the first would stop
    its Redis under it), and the first keeps running."""
    data = tmp_path / "data"
    first = supervise({"q": {"handler": "tests.support.handlers:record"}}, notify, embedded=True,
                      redis={"data_dir": str(data)})
    notify.wait("READY=1")
    r = procs.run("-c", str(first.cfg), timeout=30)
    _one_line_error(r, "already run by process", "one supervisor per data dir")
    assert first.proc.poll() is None
    assert procs.run("publish", "-c", str(first.cfg), "q", "1").returncode == 0


# --- flags ------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--url", "--namespace", "-c"])
def test_an_empty_option_is_refused_not_taken_for_its_default(flag: str, redis_url: str) -> None:
    """--namespace '' (or --url '', -c ''): a usage error, never the default namespace or Redis."""
    target = ["--url", redis_url] if flag == "--namespace" else []
    r = procs.run("publish", *target, flag, "", "q", "{}")
    _one_line_error(r, f"{flag}", "empty string")


def test_an_empty_token_is_refused(redis_url: str) -> None:
    """web --token '': a usage error, not a web UI without a token."""
    r = procs.run("web", "--url", redis_url, "--listen", "127.0.0.1:0", "--token", "", timeout=20)
    _one_line_error(r, "--token", "empty string")


def test_a_5000_digit_limit_is_a_short_usage_error(redis_url: str) -> None:
    """dlq --limit with 5,000 digits: the usual range message, cut, without Python internals."""
    r = procs.run("dlq", "--url", redis_url, "list", "q", "--limit", "9" * 5000)
    _one_line_error(r, "expected an integer from 1 to 100000")
    assert len(r.stderr) < 300 and "_limit" not in r.stderr


def test_a_5000_digit_body_says_nothing_of_python_settings(redis_url: str) -> None:
    """publish q 999...(5,000 digits): not valid JSON, without the interpreter's set_int_max_str_digits hint."""
    r = procs.run("publish", "--url", redis_url, "q", "9" * 5000)
    _one_line_error(r, "not valid JSON")
    assert "sys.set_int_max_str_digits" not in r.stderr


# --- secrets in urls --------------------------------------------------------------------------


@pytest.mark.parametrize("url, secret", [
    ("redis://:p@ssWord99@localhost:0/0", "ssWord99"),
    ("redis://us@er:Secret99@localhost:0/0", "Secret99"),
])
def test_a_password_holding_an_at_sign_is_never_shown(url: str, secret: str) -> None:
    """A raw '@' in the userinfo: redis-py takes everything to the last '@' as the password; so does the mask."""
    r = procs.run("publish", "--url", url, "q", "{}")
    _one_line_error(r, "redis.url")
    assert secret not in r.stderr
    assert secret not in safe.mask_url(url) and secret not in safe.mask_url(f"see {url} there")


# --- the Python API ---------------------------------------------------------------------------


@pytest.fixture
def producer(redis_url: str) -> Iterator[Producer]:
    with Producer(redis_url) as p:
        yield p


class _Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("repr")

    __str__ = __repr__


@pytest.mark.parametrize("queue", [["q"], {"q": 1}, None, 5, b"q", _Unprintable()])
def test_a_queue_name_of_any_type_is_a_message_error(producer: Producer, queue: Any) -> None:
    """publish/publish_many with a list, None, bytes or an unprintable object as queue: MessageError."""
    with pytest.raises(MessageError, match="expected a name string"):
        producer.publish(queue, {})
    with pytest.raises(MessageError, match="expected a name string"):
        producer.publish_many(queue, [{}])


@pytest.mark.parametrize("url", [None, 5, b"redis://localhost"])
def test_a_url_that_is_not_a_string_is_a_config_error(url: Any) -> None:
    """Producer(None) or Producer(b'...'): ConfigError, not TypeError/AttributeError."""
    with pytest.raises(ConfigError, match="redis.url: expected a url string"):
        Producer(url)


@pytest.mark.parametrize("size", ["1MB", -1, 0, True, 2**40, 1.5])
def test_a_bad_max_message_size_is_a_config_error(redis_url: str, size: Any) -> None:
    """max_message_size that is no byte count Redis can hold: ConfigError at construction."""
    with pytest.raises(ConfigError, match="max_message_size"):
        Producer(redis_url, max_message_size=size)


@pytest.mark.parametrize("bodies", [5, "abc", b"abc", {"a": 1}])
def test_bodies_that_are_not_a_collection_of_bodies_are_refused(producer: Producer, bodies: Any) -> None:
    """publish_many of an int, a str (one message per letter!) or a dict (one per key): MessageError."""
    with pytest.raises(MessageError, match="bodies must be an iterable"):
        producer.publish_many("q", bodies)


def test_a_generator_that_raises_midway_sends_nothing_and_says_so(producer: Producer,
                                                                   redis_client: Any) -> None:
    """publish_many over a generator that fails at its third body: nothing queued, and the error says so."""
    def bodies() -> Iterator[int]:
        yield 1
        yield 2
        raise RuntimeError("boom")

    with pytest.raises(MessageError, match="nothing was sent") as caught:
        producer.publish_many("q", bodies())
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert redis_client.llen(QueueKeys("smq", "q").pending) == 0


@pytest.mark.parametrize("path", [None, 5])
def test_from_config_without_a_path_is_a_config_error(path: Any) -> None:
    """Producer.from_config(None): ConfigError naming the config path."""
    with pytest.raises(ConfigError, match="config path"):
        Producer.from_config(path)


def test_from_config_of_a_fifo_does_not_hang(fifo: Path) -> None:
    """Producer.from_config(FIFO) is refused at once (checked in a child with a deadline)."""
    code = f"from smqsup.client.producer import Producer\nProducer.from_config({str(fifo)!r})"
    r = subprocess.run([sys.executable, "-c", code], env=procs.env(), capture_output=True, text=True, timeout=20)
    assert "ConfigError" in r.stderr and "not a regular file" in r.stderr, r.stderr


# --- the listen address, the token file, the url from the environment -------------------------


@pytest.mark.parametrize("listen, problem", [
    ("\udcff:8087", "invalid host name"),  # bytes that are not UTF-8 on the command line
    ("a" * 300 + ":8087", "invalid host name"),  # a label IDNA refuses (over 63 characters)
    ("a..b:8087", "invalid host name"),
    ("x" * 100_000 + ":8087", "invalid host name"),
    ("localhost:" + "9" * 5000, "expected host:port"),
    ("localhost:99999", "expected a port from 0 to 65535"),
    ("localhost:-1", "expected host:port"),
    ("localhost:nan", "expected host:port"),
    ("[::1:8087", "expected host:port"),
    ("localhost", "expected host:port"),
    ("", "empty string"),
])
def test_a_hostile_listen_address_is_one_line(listen: str, problem: str) -> None:
    """web --listen undecodable, too long, out of range, NaN or empty: one line, exit 2, nothing bound."""
    r = procs.run("web", "--url", "redis://127.0.0.1:1", "--listen", listen, timeout=20)
    _one_line_error(r, problem)
    assert len(r.stderr) < 400, r.stderr


def test_a_hostile_token_file_is_one_line(tmp_path: Path) -> None:
    """--token-file that is a directory, an undecodable name, a huge line or a lone surrogate: one line each."""
    long_line, huge, surrogate = tmp_path / "long", tmp_path / "huge", tmp_path / "surrogate"
    long_line.write_text("t" * 5000 + "\n")
    huge.write_bytes(b"x" * 10_000_000)  # no newline at all
    surrogate.write_bytes(b"tok\xed\xa0\x80en\n")  # U+D800 encoded as if it were UTF-8
    for path, problem in ((str(tmp_path), "cannot read it"), (str(tmp_path / "\udcff"), "cannot read it"),
                          (str(long_line), "longer than 4096"), (str(huge), "longer than 4096"),
                          (str(surrogate), "not UTF-8")):
        r = procs.run("web", "--url", "redis://127.0.0.1:1", "--listen", "127.0.0.1:0", "--token-file", path,
                      timeout=20)
        _one_line_error(r, "--token-file", problem)


@pytest.mark.parametrize("value, problem", [
    ("", "-c FILE is required"),
    ("redis://" + "h" * 300 + ":1/0", "invalid host name in url"),
    ("redis://\udcff:1/0", "invalid host name in url"),
    ("redis://127.0.0.1:" + "9" * 5000 + "/0", "invalid port in url"),
    ("redis://127.0.0.1:-1/0", "invalid port in url"),
    ("redis://127.0.0.1:nan/0", "invalid port in url"),
    ("x" * 100_000, "unsupported url scheme"),
])
def test_a_hostile_url_from_the_environment_is_one_line(value: str, problem: str) -> None:
    """$SMQSUP_REDIS_URL empty, undecodable, with a host IDNA refuses, a NaN or huge port, or very long: one line."""
    r = procs.run("status", env=procs.env(SMQSUP_REDIS_URL=value), timeout=30)
    _one_line_error(r, problem)
    assert len(r.stderr) < 400, r.stderr


# --- publish flags ----------------------------------------------------------------------------

def _flag_case(value: object) -> str:
    """A short test id: a parser by its name, a value by the start of its repr."""
    return getattr(value, "__name__", None) or repr(value)[:24]


DURATION = "expected a duration like 500ms, 5s, 2m or 1h"
AT = "expected an ISO 8601 time with its zone (2026-12-24T18:00:00Z) or epoch seconds"
PRIORITY = "expected an integer from 0 to 9"
HUGE = "9" * 400


@pytest.mark.parametrize("parse, text, problem", [
    *[(parse, text, problem) for parse in (cli_publish.parse_delay, cli_publish.parse_positive_duration)
      for text, problem in [
          (HUGE, "a duration must be at most 3650d"), (HUGE + "s", "a duration must be at most 3650d"),
          ("1e400", DURATION), ("nan", DURATION), ("inf", DURATION), ("-inf", DURATION),
          ("-1s", "a duration must not be negative"), ("", DURATION), ("5x", DURATION), ("5 s s", DURATION),
          ("\udcff", DURATION), ("5\udcffs", DURATION), ("٣s", DURATION), ("3651d", "a duration must be at most 3650d"),
          ("1:30", DURATION), ("0x10", DURATION), ("true", DURATION)]],
    (cli_publish.parse_positive_duration, "0", "expected a duration greater than 0"),
    (cli_publish.parse_positive_duration, "0ms", "expected a duration greater than 0"),
    (cli_publish.parse_at, "2026-12-24T18:00:00", "give a timezone (Z or +HH:MM)"),
    (cli_publish.parse_at, "2026-12-24", "give a timezone (Z or +HH:MM)"),
    (cli_publish.parse_at, "99999-12-24T18:00:00Z", AT),
    (cli_publish.parse_at, "2026-12-24T18:00:00+24:00", AT),
    (cli_publish.parse_at, "2026-02-30T18:00:00Z", AT),
    (cli_publish.parse_at, "２０２６-12-24T18:00:00Z", AT),
    (cli_publish.parse_at, "2026-12-24T18:00:00\udcffZ", AT),
    (cli_publish.parse_at, HUGE, "epoch seconds must be before the year 10000"),
    (cli_publish.parse_at, "1798135200000", "epoch seconds must be before the year 10000 (milliseconds given?)"),
    (cli_publish.parse_at, "-1", AT), (cli_publish.parse_at, "nan", AT), (cli_publish.parse_at, "inf", AT),
    (cli_publish.parse_at, "1e9", AT), (cli_publish.parse_at, "", AT), (cli_publish.parse_at, "5x", AT),
    *[(cli_publish.parse_priority, text, PRIORITY)
      for text in ["10", "-1", "1.5", "true", "", " 5", "٣", "05", "\udcff", HUGE, "nan", "5x"]],
    (cli_publish.parse_dedup_key, "", "expected a key, got an empty string"),
    (cli_publish.parse_dedup_key, "k\udcff", "expected UTF-8 text"),
    (cli_publish.parse_dedup_key, "é" * 257, "a key is at most 512 UTF-8 bytes, not 514"),
    (cli_publish.parse_dedup_key, "x" * 100_000, "a key is at most 512 UTF-8 bytes, not 100000"),
], ids=_flag_case)
def test_a_hostile_publish_flag_value_is_refused_in_a_short_line(
        parse: Callable[[str], object], text: str, problem: str) -> None:
    """Huge, non-finite, negative, empty, undecodable, zoneless or out-of-range: the problem and the value, cut and escaped."""
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        parse(text)
    message = str(caught.value)
    assert message.startswith(problem) and message.isprintable() and len(message) < 200, message
    if text:
        assert message.endswith(f", got '{safe.escape(text, 40)}'"), message


@pytest.mark.parametrize("parse, text, value", [
    (cli_publish.parse_delay, "0", 0.0), (cli_publish.parse_delay, "500ms", 0.5),
    (cli_publish.parse_delay, "2m", 120.0), (cli_publish.parse_delay, " 1.5h ", 5400.0),
    (cli_publish.parse_delay, "3650d", 3650 * 86400.0), (cli_publish.parse_positive_duration, "1ms", 0.001),
    (cli_publish.parse_at, "0", 0.0), (cli_publish.parse_at, "253402300799", 253402300799.0),
    (cli_publish.parse_at, "9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)),
    (cli_publish.parse_priority, "0", 0), (cli_publish.parse_priority, "9", 9),
    (cli_publish.parse_dedup_key, "é" * 256, "é" * 256), (cli_publish.parse_dedup_key, " ", " "),
], ids=_flag_case)
def test_publish_flag_values_at_their_bounds_are_taken(parse: Callable[[str], object], text: str,
                                                       value: object) -> None:
    """Each bound is inclusive: 0 and 3650d, epoch 0 and the end of 9999, priority 0 and 9, 512 bytes."""
    assert parse(text) == value


def test_an_undecodable_publish_flag_is_one_escaped_line() -> None:
    """argv bytes that are not UTF-8 (surrogate-escaped) in --dedup, --delay, --at: one line, escaped, exit 2."""
    for flag in ("--dedup", "--delay", "--at", "--priority"):
        r = procs.run("publish", "--url", "redis://127.0.0.1:1", "q", "1", flag, "a\udcff\x1b[2J")
        _one_line_error(r, f"argument {flag}: ", "got 'a\\udcff\\x1b[2J'")


@pytest.mark.parametrize(("size", "cut"), [(100_000, 99_800), (2_100, 1_900), (210, 10), (200, 0)])
def test_a_long_text_shown_to_a_person_says_how_much_was_cut(size: int, cut: int) -> None:
    """safe.shown cuts a huge text in two steps (a bounded scrub first): its note counts every character
    cut, not only the second step's; a password in it stays masked."""
    text = "redis://:secret-pw@h/" + "x" * (size - 21)
    out = safe.shown(text, 200)
    assert "secret-pw" not in out and out.startswith("redis://:***@h/")
    assert out.endswith(f"...(+{cut - 6} chars)" if cut else "x"), out[-30:]  # "***" is 6 shorter than the pw


# --- a reader that goes away ---------------------------------------------------------------


@pytest.mark.parametrize("command", [["messages", "q", "--limit", "5000", "--json"],
                                     ["dlq", "list", "q", "--limit", "5000", "--json"],
                                     ["status", "--json", "--watch", "0.1"],
                                     ["schedules", "--json"]])
def test_a_closed_pipe_ends_every_command_quietly(command: list[str], redis_url: str) -> None:
    """`smqsup ... | head -1`: the reader closes the pipe after one line; the command stops at once, status 0,
    with nothing on stderr (no BrokenPipe traceback), even one that would print for ever (--watch)."""
    with Producer(redis_url) as p:
        p.publish_many("q", [{"pad": "x" * 200, "n": n} for n in range(5000)])
    k = QueueKeys("smq", "q")
    client = client_for(redis_url)
    client.lpush(k.dead, *[b'{"reason":"r","at_ms":1}\n0|' + b"y" * 300 for _ in range(5000)])
    client.hset(k.schedules, mapping={f"s{n}": b"{}" for n in range(2000)})  # listed with their errors
    proc = procs.smqsup(*command, "--url", redis_url)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0, err
    assert err == "", err
