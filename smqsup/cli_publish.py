"""``smqsup publish``: its arguments and the publish itself."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from smqsup.errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``smqsup publish`` but the target (-c FILE, --url, --namespace)."""
    p.add_argument("queue")
    p.add_argument("body", metavar="JSON")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE")


def publish(args: argparse.Namespace, url: str, namespace: str, max_size: int) -> int:
    """Publish the message (or stdin's lines) the arguments give; print each id."""
    from smqsup.producer import Producer

    headers = dict(_header(h) for h in args.header) or None
    with Producer(url, namespace, max_message_size=max_size) as producer:
        if args.body == "-":
            bodies = [_json_arg(line, f"stdin line {n}") for n, line in enumerate(sys.stdin, 1) if line.strip()]
            for mid in producer.publish_many(args.queue, bodies, headers=headers):
                print(mid)
        else:
            print(producer.publish(args.queue, _json_arg(args.body, "JSON"), headers=headers))
    return 0


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
