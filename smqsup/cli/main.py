"""The ``smqsup`` command: the top-level parser, dispatch to the command
modules, and one-line errors.

    smqsup -c FILE                      run the supervisor (also: smqsup run -c FILE)
    smqsup check -c FILE                validate FILE and import its handlers
    smqsup publish (-c FILE | --url URL) QUEUE (JSON | -) [--header KEY=VALUE]
                   [--delay DURATION | --at WHEN] [--priority 0-9]
                   [--dedup KEY [--dedup-ttl DURATION]] [--ttl DURATION] [--group NAME]
    smqsup consume -c FILE QUEUE        one consumer in the foreground
    smqsup dlq (-c FILE | --url URL) list|requeue|purge QUEUE
    smqsup pause|resume (-c FILE | --url URL) QUEUE
    smqsup messages (-c FILE | --url URL) QUEUE [--state STATE] [--limit N] [--json]
    smqsup remove (-c FILE | --url URL) QUEUE ID...   (exit 1 if some id was not removed)
    smqsup cancel (-c FILE | --url URL) QUEUE ID...   (exit 1 if some had ended or are unknown)
    smqsup events (-c FILE | --url URL) QUEUE [--since now|MS-SEQ|TIME] [--follow] [--json] [--limit N]
    smqsup status (-c FILE | --url URL) [--json] [--watch [SECONDS]]
    smqsup schedules (-c FILE | --url URL) [--json] | pause NAME | resume NAME
    smqsup web (-c FILE | --url URL) [--listen HOST:PORT] [--token TOKEN]
    smqsup roll -c FILE [QUEUE...]     roll a running supervisor's consumers (no pid needed)

Exit status: 0 success, 2 bad config or usage (one line on stderr, no
traceback), 1 unexpected error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Optional

from smqsup import __version__, logs, safe
from smqsup.cli import (
    dlq_cmd,
    events_cmd,
    publish_cmd,
    queue_cmd,
    roll_cmd,
    run_cmd,
    schedules_cmd,
    status_cmd,
    web_cmd,
)
from smqsup.cli.common import EXIT_ERROR, EXIT_OK, Parser, nonempty
from smqsup.errors import SmqsupError, UsageError

log = logging.getLogger("smqsup")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command line, its commands in the order `smqsup --help` lists them."""
    parser = Parser(prog="smqsup", description="Redis-backed message queue and consumer supervisor")
    parser.add_argument("--version", action="version", version=f"smqsup {__version__}")
    parser.add_argument("-c", "--config", metavar="FILE", type=nonempty, help="queues.yaml (runs the supervisor)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", choices=logs.FORMATS,
                        help="text (default) or json: one JSON object a line (wins over log_format in FILE)")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    for add in (run_cmd.add_run_and_check, publish_cmd.add_publish, run_cmd.add_consume, status_cmd.add_status, web_cmd.add_web,
                dlq_cmd.add_dlq, queue_cmd.add_pause_resume, queue_cmd.add_messages, queue_cmd.add_remove,
                queue_cmd.add_cancel, events_cmd.add_events,
                schedules_cmd.add_schedules, roll_cmd.add_roll):
        add(sub)
    return parser


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run_cmd.cmd_run,
    "check": run_cmd.cmd_check,
    "publish": publish_cmd.cmd_publish,
    "consume": run_cmd.cmd_consume,
    "dlq": dlq_cmd.cmd_dlq,
    "status": status_cmd.cmd_status,
    "web": web_cmd.cmd_web,
    "pause": queue_cmd.cmd_pause,
    "resume": queue_cmd.cmd_resume,
    "messages": queue_cmd.cmd_messages,
    "remove": queue_cmd.cmd_remove,
    "cancel": queue_cmd.cmd_cancel,
    "events": events_cmd.cmd_events,
    "schedules": schedules_cmd.cmd_schedules,
    "roll": roll_cmd.cmd_roll,
}


#: The role a command's process has in its JSON log lines (else the command's name).
_ROLES = {"run": "supervisor", "consume": "consumer"}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the console script; returns the exit status_cmd."""
    # Handlers are imported relative to the working directory, as with
    # `python -m` (the console script's own directory is no place for them).
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        args = build_parser().parse_args(argv)
        logs.setup(args.log_level, args.log_format or "text")
        command = args.command or ("run" if args.config else None)
        logs.set_context(role=_ROLES.get(command or "", command or "smqsup"))
        if command is None:
            raise UsageError("smqsup: give -c FILE to run the supervisor, or a command (see smqsup --help)")
        safe.set_title(_command_title(args, command))
        code = _COMMANDS[command](args)
        sys.stdout.flush()  # here, where a reader gone away is caught (not at exit)
        return code
    except BrokenPipeError:
        return _reader_gone()
    except SmqsupError as exc:
        # One line per problem, secrets masked, nothing a terminal would obey.
        lines = str(exc).splitlines() or [type(exc).__name__]
        print("\n".join(f"Error: {safe.shown(line, safe.LOG_VALUE_CHARS)}" for line in lines), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - unexpected: logged (secrets masked) with its traceback
        log.exception("unexpected error")
        return EXIT_ERROR


def _reader_gone() -> int:
    """The reader of our output closed it (``smqsup ... | head -1``): stop
    quietly, as a Unix filter does, with status 0. Standard output is
    pointed at /dev/null, so that the flush at exit cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind sys.stdout: nothing to flush into
        pass
    return EXIT_OK


def _command_title(args: argparse.Namespace, command: str) -> str:
    """The command and its config file, never a url or a token given as an
    argument (the supervisor, its consumers and the web set their own)."""
    where = f" -c {safe.escape(args.config, 200)}" if getattr(args, "config", None) else ""
    of = f" {safe.escape(args.queue, 200)}" if getattr(args, "queue", None) else ""
    return f"smqsup: {command}{of}{where}"
