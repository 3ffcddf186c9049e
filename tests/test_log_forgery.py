"""Log lines that message content cannot forge or flood: every text that can
come from a message or an exception (arguments, the message itself, a
traceback, a dict logged whole) is escaped and each line capped, in the
text and the JSON formats; the formatters alone, and a real supervisor
whose handler raises a hostile text."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator

import pytest
import redis

from smqsup import logs
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.helpers import wait_for

#: What a hostile exception text tries: erase the terminal line, return the cursor, and print a
#: supervisor's line of its own (in both formats), then a JS line separator and a C1 control.
FORGED_TEXT = "2026-12-07 12:00:00,000 INFO [1] smqsup.supervisor.arbiter: supervisor 1 stopped"
FORGED_JSON = '{"level": "INFO", "role": "supervisor", "msg": "supervisor 1 stopped"}'
HOSTILE = f"\x1b[2K\r{FORGED_TEXT}\n{FORGED_JSON}\n\u2028\u2029\x85\x9b31m\x7f\udcff"
#: The longest line either format may write, in bytes.
LIMIT = 64 * 1024


@pytest.fixture
def captured() -> Iterator[Callable[[str], tuple[logging.Logger, io.StringIO]]]:
    """A logger writing through logs.setup's handler chain (format "text" or "json") into a buffer."""
    made: list[logging.Logger] = []

    def make(fmt: str) -> tuple[logging.Logger, io.StringIO]:
        out = io.StringIO()
        handler = logging.StreamHandler(out)
        handler.setFormatter(logs.JsonFormatter() if fmt == "json" else
                             logs.PlainFormatter("%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"))
        handler.addFilter(logs.UntrustedArguments())
        logger = logging.getLogger(f"test.forgery.{fmt}")
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        made.append(logger)
        return logger, out

    yield make
    for logger in made:
        logger.handlers[:] = []


def _check_lines(raw: bytes, fmt: str) -> list[bytes]:
    """The lines of ``raw`` (split on b"\\n" only): each under LIMIT bytes, with no control character,
    line or paragraph separator, C1 control, DEL or lone surrogate, none starting with a forged line,
    each a JSON object in the json format."""
    lines = raw.split(b"\n")
    assert lines[-1] == b""
    for line in lines[:-1]:
        assert len(line) < LIMIT, len(line)
        text = line.decode("utf-8")  # (strict: a raw lone surrogate cannot be written as UTF-8)
        assert text.isprintable(), ascii(text[:200])
        assert not text.lstrip().startswith((FORGED_TEXT[:20], FORGED_JSON[:10])), text[:200]
        if fmt == "json":
            assert isinstance(json.loads(text), dict)
    return lines[:-1]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_traceback_holding_a_hostile_text_is_escaped_and_capped(
        fmt: str, captured: Callable[[str], tuple[logging.Logger, io.StringIO]]) -> None:
    """log.exception with an exception whose text is 1 MiB holding ESC[2K, \\r, a forged line of each
    format, U+2028, C1 and a lone surrogate: every line is printable and under 64 KiB, none forged,
    the exception's text is shown escaped (its first bytes are there), the cut is marked."""
    logger, out = captured(fmt)
    try:
        raise ValueError(HOSTILE + "y" * (1 << 20))
    except ValueError:
        logger.exception("handler failed")
    lines = _check_lines(out.getvalue().encode("utf-8", "surrogatepass"), fmt)
    text = "\n".join(line.decode() for line in lines)
    assert "ValueError: \\x1b[2K\\r2026-12-07" in text.replace("\\\\", "\\")
    assert "chars)" in text  # the cut says how much it cut


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_hostile_message_template_and_logger_name_are_escaped(
        fmt: str, captured: Callable[[str], tuple[logging.Logger, io.StringIO]]) -> None:
    """A handler logging a body as the message itself (no arguments), or a huge one: escaped, one line,
    capped; a hostile text in a chained exception (its cause) and in a note too."""
    logger, out = captured(fmt)
    logger.warning(HOSTILE)
    logger.warning(HOSTILE * 20_000)
    try:
        try:
            raise KeyError(HOSTILE)
        except KeyError as cause:
            exc = RuntimeError("outer")
            exc.add_note(HOSTILE)
            raise exc from cause
    except RuntimeError:
        logger.exception("chained")
    lines = _check_lines(out.getvalue().encode("utf-8", "surrogatepass"), fmt)
    assert len([line for line in lines if not line.startswith(b" ")]) == 3


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_single_dict_argument_keeps_its_value_as_logged(
        fmt: str, captured: Callable[[str], tuple[logging.Logger, io.StringIO]]) -> None:
    """log.info("x: %s", body) with a dict (logging's single-mapping quirk): the dict as Python prints it,
    numbers and nested values unquoted; a hostile value in it still escaped; a "%(key)s" template
    still reads its keys."""
    logger, out = captured(fmt)
    body = {"n": 1, "nested": {"ok": True, "list": [1, 2.5]}}
    logger.info("x: %s", body)
    logger.info("y: %r", body)
    logger.info("z: %(n)d %(e)s", {"n": 7, "e": "a\nb"})
    logger.info("w: %s", {"e": "\x1b[2K\u2028"})
    got = [json.loads(line)["msg"] if fmt == "json" else line.split(": ", 1)[1]
           for line in out.getvalue().splitlines()]
    assert got[:3] == [f"x: {body}", f"y: {body!r}", "z: 7 a\\nb"]
    assert got[3] == "w: {'e': '\\x1b[2K\\u2028'}"


class _Weird:
    def __str__(self) -> str:
        raise RuntimeError("no str")


def test_odd_arguments_and_huge_lines_still_make_one_bounded_line(
        captured: Callable[[str], tuple[logging.Logger, io.StringIO]]) -> None:
    """An argument whose str() raises, wide characters (4 bytes each in UTF-8) past the cap: one line
    each, under 64 KiB in bytes."""
    for fmt in ("text", "json"):
        logger, out = captured(fmt)
        logger.warning("%s", _Weird())
        logger.warning("\U0001F600" * 100_000)
        try:
            raise ValueError("\U0001F600" * 100_000)
        except ValueError:
            logger.exception("%s", "\U0001F600" * 100_000)
        assert len(_check_lines(out.getvalue().encode(), fmt)) >= 3


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_handler_raising_a_hostile_text_cannot_forge_or_flood_the_supervisors_log(
        fmt: str, supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: "redis.Redis") -> None:
    """Real supervisor: a handler raises ValueError(body["e"]) with 1 MiB holding ESC[2K\\r and a forged
    supervisor line after a newline, logging it first with its traceback and the whole body: every line of the output is under 64 KiB and printable, none is
    forged, and the JSON format carries no raw U+2028."""
    s = supervise({"q": {"handler": "tests.support.handlers:loud", "retry_threshold": 0}}, log_format=fmt)
    with Producer(redis_url) as p:
        p.publish("q", {"e": HOSTILE.replace("\udcff", "") + "y" * 1_000_000})  # (a body is valid Unicode)
    wait_for(lambda: redis_client.llen(QueueKeys("smq", "q").dead) == 1, timeout_s=30)
    wait_for(lambda: "handler failed on" in s.log(), timeout_s=10)
    s.stop()
    raw = s.log_path.read_bytes()
    assert "\u2028".encode() not in raw and b"\x1b" not in raw and b"\r" not in raw
    _check_lines(raw, fmt)
    assert raw.count(b"Traceback") >= 1
