"""``smqsup publish``: its arguments, the parsers of its flags, and the publish itself.

    smqsup publish (-c FILE | --url URL) QUEUE (JSON | -) [--header KEY=VALUE]
                   [--delay DURATION | --at WHEN] [--priority 0-9]
                   [--dedup KEY [--dedup-ttl DURATION]] [--ttl DURATION] [--group NAME]

Each flag's parser takes the text argv gave and returns the value the
Producer takes, or raises ``argparse.ArgumentTypeError``: the one-line usage
error (exit 2) ``smqsup publish: argument --delay: PROBLEM, got 'VALUE'``,
the value cut and escaped. The Producer checks the values again; these
checks only keep a typo from reaching Redis as something else.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from typing import Any

from smqsup import safe
from smqsup.cli.common import BY_FILE_OR_URL, EXIT_OK, Commands, Parser, add_command, arg, one_of, target
from smqsup.errors import ConfigError, UsageError

#: Longest part of a bad flag value an error shows, in characters.
_SHOWN_CHARS = 40
#: Largest dedup key, in UTF-8 bytes (the Producer's bound).
DEDUP_KEY_MAX_BYTES = 512
#: Latest --at given as epoch seconds: 9999-12-31T23:59:59Z, as late as a
#: datetime (and an ISO 8601 time) goes.
_AT_MAX_EPOCH_S = 253402300799.0
#: Epoch seconds as --at takes them: digits, a fraction maybe; no sign, no exponent.
_EPOCH = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def add_publish(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup publish``."""
    add_command(
        sub, "publish", "publish one message (JSON), or one per stdin line with '-'", *BY_FILE_OR_URL, arg("queue"),
        arg("body", metavar="JSON", help="the message body, or '-': one message per stdin line, every flag applying to each"),
        arg("--header", action="append", default=[], metavar="KEY=VALUE"),
        one_of(arg("--delay", type=parse_delay, metavar="DURATION",
                   help="deliver after DURATION (500ms, 5s, 2m, 1h, 1d; a number is seconds)"),
               arg("--at", type=parse_at, metavar="WHEN",
                   help="deliver at WHEN: ISO 8601 with its zone (2026-12-24T18:00:00Z, "
                        "2026-12-24T19:00:00+01:00) or epoch seconds")),
        arg("--priority", type=parse_priority, metavar="N", help="0 (the default) to 9: higher priorities are delivered first"),
        arg("--dedup", type=parse_dedup_key, metavar="KEY",
            help="refuse this message while one published with KEY is held (see --dedup-ttl)"),
        arg("--dedup-ttl", type=parse_positive_duration, metavar="DURATION",
            help="how long KEY is held (default: the queue's dedup_ttl with -c FILE, else 24h)"),
        arg("--ttl", type=parse_positive_duration, metavar="DURATION",
            help="dead-letter it as expired if no handler takes it within DURATION of its publish"),
        arg("--group", type=parse_group, metavar="NAME",
            help="its message group (a tenant, a customer): consumers take from the groups in turn"))


def cmd_publish(args: argparse.Namespace) -> int:
    """``smqsup publish``: publish, print each id."""
    options = publish_options(args)  # its usage errors come before the config's
    url, namespace, max_size = target(args)
    return publish(args, options, url, namespace, max_size)


# --- the flags' parsers -------------------------------------------------------------------


def _refused(problem: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{problem}, got '{safe.escape(text, _SHOWN_CHARS)}'")


def _duration(text: str, *, positive: bool) -> float:
    from smqsup.config import scalars  # here, not at the top: only a duration given needs it

    check = scalars.positive_long_duration if positive else scalars.long_duration
    try:
        return check(text)
    except ConfigError as exc:
        # Given no key and no file, its text is "PROBLEM, got VALUE", the
        # problem a fixed phrase: the value is shown again, shorter.
        raise _refused(str(exc).partition(", got ")[0], text) from None


def parse_delay(text: str) -> float:
    """--delay: seconds from ``0``, ``500ms``, ``5s``, ``2m``, ``1h``, ``1d``, up to 3650d."""
    return _duration(text, positive=False)


def parse_positive_duration(text: str) -> float:
    """--ttl, --dedup-ttl: seconds, as --delay takes them, but more than 0."""
    return _duration(text, positive=True)


def parse_at(text: str) -> datetime | float:
    """--at: an aware datetime from ISO 8601 with its zone, or epoch seconds
    (a float, at most the end of the year 9999). A time without a zone is
    refused: whose local time it means is a guess."""
    if _EPOCH.fullmatch(text):
        seconds = float(text)  # a float never raises: 400 digits are inf
        if seconds > _AT_MAX_EPOCH_S:
            raise _refused("epoch seconds must be before the year 10000 (milliseconds given?)", text)
        return seconds
    try:
        when = datetime.fromisoformat(text)
    except ValueError:  # a year past 9999, an offset of a day or more, surrogates
        raise _refused("expected an ISO 8601 time with its zone (2026-12-24T18:00:00Z) "
                       "or epoch seconds", text) from None
    if when.utcoffset() is None:
        raise _refused("give a timezone (Z or +HH:MM)", text)
    return when


def parse_priority(text: str) -> int:
    """--priority: one ASCII digit, 0 to 9."""
    if not re.fullmatch(r"[0-9]", text):
        raise _refused("expected an integer from 0 to 9", text)
    return int(text)


def parse_dedup_key(text: str) -> str:
    """--dedup: a key of 1 to 512 UTF-8 bytes (argv bytes that are not UTF-8 refused)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a key, got an empty string")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: argv bytes Python could not decode
        raise _refused("expected UTF-8 text", text) from None
    if size > DEDUP_KEY_MAX_BYTES:
        raise _refused(f"a key is at most {DEDUP_KEY_MAX_BYTES} UTF-8 bytes, not {size}", text)
    return text


def parse_group(text: str) -> str:
    """--group: a name of 1 to 256 UTF-8 bytes without control characters."""
    # The Producer's check; here, not at the top: client.options imports the
    # store's scripts, and so redis-py, which only a --group given pays.
    from smqsup.client.options import group
    from smqsup.errors import MessageError

    try:
        group(text)
    except MessageError as exc:
        raise _refused(str(exc).removeprefix("group: ").split(" (")[0], text) from None
    return text


# --- publishing -----------------------------------------------------------------------------


def publish_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Producer.publish keywords the flags give, only those given (so a
    Producer without them still publishes a message that uses none)."""
    if args.dedup_ttl is not None and args.dedup is None:
        raise UsageError("smqsup publish: --dedup-ttl needs --dedup KEY")
    given = {
        "delay": args.delay, "at": args.at, "priority": args.priority,
        "dedup_key": args.dedup, "dedup_ttl": args.dedup_ttl, "ttl": args.ttl, "group": args.group,
    }
    return {name: value for name, value in given.items() if value is not None}


def _queue_dedup_ttl(path: str, queue: str) -> dict[str, Any]:
    """``{"dedup_ttl": seconds}`` of ``queue`` in the config at ``path``; empty
    when the file has no such queue (the Producer's default then applies)."""
    from smqsup.config.model import load

    q = load(path).queues.get(queue)
    return {"dedup_ttl": q.dedup_ttl_s} if q is not None else {}


def publish(args: argparse.Namespace, options: dict[str, Any], url: str, namespace: str, max_size: int) -> int:
    """Publish the message (or stdin's lines) the arguments give, with the
    ``options`` publish_options made of them; print each id."""
    # Here, not at the top: the Producer imports the store, and so redis-py
    # (see cli.common.connect).
    from smqsup.client.producer import Producer
    from smqsup.config import model as config_mod

    options = dict(options)
    if args.config and "dedup_key" in options and "dedup_ttl" not in options:
        options.update(_queue_dedup_ttl(args.config, args.queue))
    headers = dict(_header(h) for h in args.header) or None
    redis_cfg = config_mod.load(args.config).redis if args.config else config_mod.RedisConfig()
    with Producer(url, namespace, max_message_size=max_size, wait_replicas=redis_cfg.wait_replicas,
                  wait_timeout=redis_cfg.wait_timeout_s) as producer:
        if args.body == "-":
            bodies = [_json_arg(line, f"stdin line {n}") for n, line in enumerate(sys.stdin, 1) if line.strip()]
            for mid in producer.publish_many(args.queue, bodies, headers=headers, **options):
                print(mid)
        else:
            print(producer.publish(args.queue, _json_arg(args.body, "JSON"), headers=headers, **options))
    return EXIT_OK


def _header(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UsageError(f"smqsup publish: --header: expected KEY=VALUE, got {text!r}")
    return key, value


def _json_arg(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise UsageError(f"smqsup publish: {where}: JSON nested too deep, got {text.strip()[:80]!r}") from None
    except ValueError as exc:
        # Python's hint for huge integers ('use sys.set_int_max_str_digits()') is not for users.
        problem = str(exc).split(";")[0]
        raise UsageError(f"smqsup publish: {where}: not valid JSON ({problem}), got {text.strip()[:80]!r}") from None
