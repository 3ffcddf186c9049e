"""What every ``smqsup`` command shares: the parser that errs in one line,
add_command() (a command's parser from its table of arguments) with the
arguments several commands take, the target options among them (-c FILE,
--url, --namespace), where those lead (connect(), queue_broker() for the
commands on one queue), the types of the flags, and the exit statuses.

A command module imports this one, never main.py (which imports them all);
nothing here imports the config reader, psutil or redis-py at module level
(see config(), target() and connect()): building the parser needs none.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from smqsup import defaults
from smqsup.config.names import validate_queue_name
from smqsup.errors import UsageError

if TYPE_CHECKING:
    from smqsup.config.model import Config
    from smqsup.store.broker import Broker

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are our one-line UsageError (exit 2)."""

    def error(self, message: str) -> Any:  # one line, exit 2, like our other errors
        raise UsageError(f"{self.prog}: {message}")


#: What ``add_subparsers`` returns (argparse gives it no public name).
Commands = argparse._SubParsersAction


def nonempty(text: str) -> str:
    """An option's value, refused when empty: ``--namespace ''`` must not
    quietly mean the default namespace, nor ``--url ''`` the environment's."""
    if not text:
        raise argparse.ArgumentTypeError("expected a value, got an empty string")
    return text


class Arg(NamedTuple):
    """One argument of a command: its names and the keywords ``add_argument`` takes."""

    names: tuple[str, ...]
    options: dict[str, Any]


def arg(*names: str, **options: Any) -> Arg:
    return Arg(names, options)


class OneOf(NamedTuple):
    """Arguments of which a command line gives one at most (a mutually exclusive group)."""

    args: tuple[Arg, ...]


def one_of(*args: Arg) -> OneOf:
    return OneOf(args)


#: -c FILE: where a command that needs its config file finds it.
BY_FILE = (arg("-c", "--config", metavar="FILE", type=nonempty, help="queues.yaml"),)
#: -c FILE, or --url and --namespace: where a command that needs only Redis reaches it.
BY_FILE_OR_URL = (
    *BY_FILE,
    arg("--url", type=nonempty, help="Redis url instead of a config file (default: "
                                     "$SMQSUP_REDIS_URL, which keeps a password off the command line)"),
    arg("--namespace", default=None, type=nonempty, help=f"key namespace (default {defaults.NAMESPACE})"),
)
#: The queue a command acts on, QUEUE in its usage.
QUEUE = arg("queue", metavar="QUEUE")
#: --json of a listing.
JSON_LINES = arg("--json", action="store_true", help="one JSON object per line")


def add_command(sub: Commands[Parser], name: str, help: str, *args: Arg | OneOf,
                description: Optional[str] = None) -> None:
    """The parser of command ``name``: its help (and description), then ``args`` in order."""
    p = sub.add_parser(name, help=help, description=description)
    for a in args:
        if isinstance(a, OneOf):
            group = p.add_mutually_exclusive_group()
            for one in a.args:
                group.add_argument(*one.names, **one.options)
        else:
            p.add_argument(*a.names, **a.options)


def listing_limit(what: str) -> Arg:
    """--limit N of a listing of ``what``: 100 unless given."""
    return arg("--limit", type=limit, default=100, help=f"most {what} to list (1 to 100000, default 100)")


def seconds(text: str) -> float:
    """A refresh period: seconds from 0.1 to 3600."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.1 <= value <= 3600:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected seconds from 0.1 to 3600, got {text[:40]!r}")
    return value


def limit(text: str) -> int:
    """--limit N of a listing: an integer from 1 to 100000."""
    # At most 6 digits before int(): a 5,000-digit one would raise inside it.
    if not text.isascii() or not text.isdigit() or len(text) > 6 or not 1 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to 100000, got {text[:40]!r}")
    return int(text)


def config(args: argparse.Namespace) -> Config:
    """The config -c FILE names; UsageError when the command was given none."""
    # Here, not at the top: the config reader (YAML, the dataclasses of every
    # section, cron) is about 55 ms of CPU that `smqsup --help` does not need.
    from smqsup.config.model import load

    if not args.config:
        raise UsageError(f"smqsup {args.command}: -c FILE is required")
    return load(args.config)


def target(args: argparse.Namespace) -> tuple[str, str, int]:
    """(url, namespace, max message size) from -c FILE or --url."""
    from smqsup.config.model import from_url  # here, not at the top: see config()

    if args.config and args.url:
        raise UsageError(f"smqsup {args.command}: give -c FILE or --url, not both")
    url = args.url or (None if args.config else os.environ.get("SMQSUP_REDIS_URL") or None)
    if url:
        cfg = from_url(url, args.namespace or defaults.NAMESPACE)
        return url, cfg.namespace, cfg.max_message_size_bytes
    cfg = config(args)
    if args.namespace:
        raise UsageError(f"smqsup {args.command}: --namespace goes with --url; -c FILE names its namespace")
    # Here, after the config's errors: launch.embedded imports psutil.
    from smqsup.launch.embedded import redis_url

    return redis_url(cfg), cfg.namespace, cfg.max_message_size_bytes


def connect(url: str, namespace: str, client_name: Optional[str] = None) -> Broker:
    """A Broker on ``url`` and ``namespace``: the one way the commands reach the store."""
    # Here, not at the top: the Broker imports redis-py, about 130 ms (python
    # -X importtime, after this module) that `smqsup --help`, `check` and
    # `run` (until it forks) do not pay.
    from smqsup.store.broker import Broker

    return Broker(url, namespace, client_name=client_name)


@contextmanager
def queue_broker(args: argparse.Namespace) -> Iterator[tuple[Broker, str]]:
    """A Broker on the command's Redis and its validated QUEUE; a note on
    stderr when no producer or consumer has ever used that queue (a typo)."""
    url, namespace, _ = target(args)
    queue = validate_queue_name(args.queue, path=f"smqsup {args.command}", key="QUEUE")
    broker = connect(url, namespace, client_name=f"smqsup-{args.command}")
    try:
        if queue not in broker.queues.known_queues():
            print(f"smqsup {args.command}: note: no producer or consumer has used queue {queue} "
                  f"in namespace {namespace} yet", file=sys.stderr)
        yield broker, queue
    finally:
        broker.close()
