"""The ``smqsup`` command: argument parsing and one-line errors.

    smqsup -c FILE                      run the supervisor (also: smqsup run -c FILE)
    smqsup check -c FILE                validate FILE and import its handlers
    smqsup publish (-c FILE | --url URL) QUEUE (JSON | -) [--header KEY=VALUE]
                   [--delay DURATION | --at WHEN] [--priority 0-9]
                   [--dedup KEY [--dedup-ttl DURATION]] [--ttl DURATION]
    smqsup consume -c FILE QUEUE        one consumer in the foreground
    smqsup dlq (-c FILE | --url URL) list|requeue|purge QUEUE
    smqsup pause|resume (-c FILE | --url URL) QUEUE
    smqsup messages (-c FILE | --url URL) QUEUE [--state STATE] [--limit N] [--json]
    smqsup remove (-c FILE | --url URL) QUEUE ID...   (exit 1 if some id was not removed)
    smqsup status (-c FILE | --url URL) [--json] [--watch [SECONDS]]
    smqsup schedules (-c FILE | --url URL) [--json] | pause NAME | resume NAME
    smqsup web (-c FILE | --url URL) [--listen HOST:PORT] [--token TOKEN]

Exit status: 0 success, 2 bad config or usage (one line on stderr, no
traceback), 1 unexpected error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from smqsup import __version__, defaults, logs, safe
from smqsup.cli import publish as cli_publish
from smqsup.cli import queue as cli_queue
from smqsup.cli import schedules as cli_schedules
from smqsup.config import model as config_mod
from smqsup.config.yamlfile import open_regular_file
from smqsup.errors import ConfigError, SmqsupError, UsageError

log = logging.getLogger("smqsup")

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, like our other errors
        raise UsageError(f"{self.prog}: {message}")


def _add_target(p: argparse.ArgumentParser, *, url: bool) -> None:
    p.add_argument("-c", "--config", metavar="FILE", type=_nonempty, help="queues.yaml")
    if url:
        p.add_argument("--url", type=_nonempty, help="Redis url instead of a config file (default: $SMQSUP_REDIS_URL, which "
                                     "keeps a password off the command line)")
        p.add_argument("--namespace", default=None, type=_nonempty, help=f"key namespace (default {defaults.NAMESPACE})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="smqsup", description="Redis-backed message queue and consumer supervisor")
    parser.add_argument("--version", action="version", version=f"smqsup {__version__}")
    parser.add_argument("-c", "--config", metavar="FILE", type=_nonempty, help="queues.yaml (runs the supervisor)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    # In the order `smqsup --help` lists them.
    for add in (_add_run_and_check, _add_publish, _add_consume, _add_status, _add_web, _add_dlq,
                cli_queue.add_pause_resume, cli_queue.add_messages, cli_queue.add_remove,
                cli_schedules.add_schedules):
        add(sub)
    return parser


#: What ``add_subparsers`` returns (argparse gives it no public name).
_Commands = argparse._SubParsersAction


def _add_run_and_check(sub: _Commands[_Parser]) -> None:
    p = sub.add_parser("run", help="run the supervisor")
    _add_target(p, url=False)
    p = sub.add_parser("check", help="validate the config and import its handlers")
    _add_target(p, url=False)


def _add_publish(sub: _Commands[_Parser]) -> None:
    p = sub.add_parser("publish", help="publish one message (JSON), or one per stdin line with '-'")
    _add_target(p, url=True)
    cli_publish.add_arguments(p)


def _add_consume(sub: _Commands[_Parser]) -> None:
    p = sub.add_parser("consume", help="run one consumer of QUEUE in the foreground")
    _add_target(p, url=False)
    p.add_argument("queue")


def _add_status(sub: _Commands[_Parser]) -> None:
    p = sub.add_parser("status", help="queue sizes, rates, consumers, collector leaders")
    _add_target(p, url=True)
    p.add_argument("--json", action="store_true", help="one JSON document (per refresh)")
    p.add_argument("--watch", nargs="?", type=_seconds, const=2.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")


def _add_web(sub: _Commands[_Parser]) -> None:
    p = sub.add_parser("web", help="serve the web UI, the JSON API and /metrics")
    _add_target(p, url=True)
    p.add_argument("--listen", metavar="HOST:PORT", type=_nonempty,
                   help=f"address to listen on (default: web.listen, else {defaults.WEB_LISTEN}; port 0: any free)")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--token-file", metavar="FILE", type=_nonempty,
                       help="read the token every request must carry from the first line of FILE "
                            "(default: $SMQSUP_WEB_TOKEN, else web.token); required to listen on a "
                            "non-loopback address")
    given.add_argument("--token", type=_nonempty, help="the token itself: other users see it in ps, prefer --token-file")


def _add_dlq(sub: _Commands[_Parser]) -> None:
    p = sub.add_parser("dlq", help="list, requeue or purge dead letters")
    _add_target(p, url=True)
    p.add_argument("action", choices=["list", "requeue", "purge"])
    p.add_argument("queue")
    p.add_argument("--limit", type=_limit, default=100, help="most entries to list (1 to 100000, default 100)")
    p.add_argument("--id", action="append", default=[], dest="ids", metavar="MESSAGE_ID",
                   help="only these messages (repeatable); default: all")
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def _nonempty(text: str) -> str:
    """An option's value, refused when empty: ``--namespace ''`` must not
    quietly mean the default namespace, nor ``--url ''`` the environment's."""
    if not text:
        raise argparse.ArgumentTypeError("expected a value, got an empty string")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.1 <= value <= 3600:  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected seconds from 0.1 to 3600, got {text[:40]!r}")
    return value


def _limit(text: str) -> int:
    # At most 6 digits before int(): a 5,000-digit one would raise inside it.
    if not text.isascii() or not text.isdigit() or len(text) > 6 or not 1 <= int(text) <= 100_000:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to 100000, got {text[:40]!r}")
    return int(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the console script; returns the exit status."""
    # Handlers are imported relative to the working directory, as with
    # `python -m` (the console script's own directory is no place for them).
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        args = build_parser().parse_args(argv)
        logs.setup(args.log_level)
        command = args.command or ("run" if args.config else None)
        if command is None:
            raise UsageError("smqsup: give -c FILE to run the supervisor, or a command (see smqsup --help)")
        safe.set_title(_command_title(args, command))
        status = _COMMANDS[command](args)
        sys.stdout.flush()  # here, where a reader gone away is caught (not at exit)
        return status
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
    queue = f" {safe.escape(args.queue, 200)}" if getattr(args, "queue", None) else ""
    return f"smqsup: {command}{queue}{where}"


def _config(args: argparse.Namespace) -> config_mod.Config:
    if not args.config:
        raise UsageError(f"smqsup {args.command}: -c FILE is required")
    return config_mod.load(args.config)


def _target(args: argparse.Namespace) -> tuple[str, str, int]:
    """(url, namespace, max message size) from -c FILE or --url."""
    if args.config and args.url:
        raise UsageError(f"smqsup {args.command}: give -c FILE or --url, not both")
    url = args.url or (None if args.config else os.environ.get("SMQSUP_REDIS_URL") or None)
    if url:
        cfg = config_mod.from_url(url, args.namespace or defaults.NAMESPACE)
        return url, cfg.namespace, cfg.max_message_size_bytes
    cfg = _config(args)
    if args.namespace:
        raise UsageError(f"smqsup {args.command}: --namespace goes with --url; -c FILE names its namespace")
    from smqsup.store.embedded import redis_url

    return redis_url(cfg), cfg.namespace, cfg.max_message_size_bytes


# --- commands ----------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    from smqsup.supervisor.arbiter import run_supervisor

    return run_supervisor(cfg)


def cmd_check(args: argparse.Namespace) -> int:
    cfg = _config(args)
    from smqsup.worker.handlers import check_handlers

    check_handlers(cfg)
    schedules = f", {len(cfg.schedules)} schedule(s)" if cfg.schedules else ""
    print(f"{cfg.path}: ok ({len(cfg.queues)} queue(s), "
          f"{sum(q.consumers for q in cfg.queues.values())} consumer(s){schedules})")
    return EXIT_OK


def cmd_publish(args: argparse.Namespace) -> int:
    options = cli_publish.publish_options(args)  # its usage errors come before the config's
    url, namespace, max_size = _target(args)
    return cli_publish.publish(args, options, url, namespace, max_size)


def cmd_consume(args: argparse.Namespace) -> int:
    from smqsup.worker.standalone import consume

    cfg = _config(args)
    if args.queue not in cfg.queues:
        raise ConfigError(f"{cfg.path}: queues.{args.queue}: no such queue in the config "
                          f"(queues: {', '.join(sorted(cfg.queues))})")
    return consume(cfg, args.queue)


def cmd_status(args: argparse.Namespace) -> int:
    from smqsup.store.broker import Broker
    from smqsup.views import status

    url, namespace, _ = _target(args)
    queues = sorted(config_mod.load(args.config).queues) if args.config else []
    broker = Broker(url, namespace, client_name="smqsup-status")
    try:
        return status.run(broker, queues, as_json=args.json, watch=args.watch)
    finally:
        broker.close()


def cmd_web(args: argparse.Namespace) -> int:
    from dataclasses import replace

    # main() has already put a title without the token or the url in place of
    # the command line; connect() registers the url's password for scrubbing.
    token = _web_token(args)
    url, namespace, _ = _target(args)
    cfg = config_mod.load(args.config) if args.config else config_mod.from_url(url, namespace)
    web = cfg.web or config_mod.WebConfig()
    web = config_mod.WebConfig(listen=args.listen or web.listen, token=token or web.token)
    from smqsup.web import serve

    def ready(address: str) -> None:
        safe.set_title(f"smqsup: web {safe.escape(address, 100)}")
        print(f"smqsup web: listening on http://{address}/", flush=True)

    serve(replace(cfg, web=web), url, ready=ready)
    return EXIT_OK


#: Longest token --token-file reads, in characters.
_TOKEN_FILE_MAX = 4096


def _web_token(args: argparse.Namespace) -> Optional[str]:
    """The token from --token (with a warning: ps shows it), --token-file
    (its first line) or $SMQSUP_WEB_TOKEN; None when none is given."""
    if args.token:
        log.warning("web: --token on the command line is visible to other users (ps); "
                    "use --token-file FILE or $SMQSUP_WEB_TOKEN instead")
        token: Optional[str] = args.token
    elif args.token_file:
        token = _read_token_file(args.token_file)
    else:
        token = os.environ.get("SMQSUP_WEB_TOKEN") or None
    safe.register_secret(token)
    return token


def _read_token_file(path: str) -> str:
    """The first line of ``path``, stripped; UsageError naming the file when
    it cannot be read or that line is empty."""
    where = f"smqsup web: --token-file {path!r}"
    try:
        with open_regular_file(path) as f:  # a FIFO must not hang the command
            raw = f.readline(4 * _TOKEN_FILE_MAX + 1)  # UTF-8: at most 4 bytes a character
    except OSError as exc:
        raise UsageError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        if len(raw) <= 4 * _TOKEN_FILE_MAX:
            raise UsageError(f"{where}: not UTF-8 text") from None
        line = raw.decode("utf-8", "replace")
    if len(line) > _TOKEN_FILE_MAX:
        raise UsageError(f"{where}: the first line is longer than {_TOKEN_FILE_MAX} characters")
    token = line.strip()
    if not token:
        raise UsageError(f"{where}: the first line is empty")
    return token


def cmd_dlq(args: argparse.Namespace) -> int:
    from smqsup.config.validate import validate_queue_name
    from smqsup.store.broker import Broker
    from smqsup.views import deadletters

    url, namespace, _ = _target(args)
    validate_queue_name(args.queue)
    broker = Broker(url, namespace)
    ids = args.ids or None
    try:
        if args.action == "list":
            entries = (deadletters.select(broker, args.queue, set(ids))[:args.limit] if ids
                       else deadletters.newest(broker, args.queue, args.limit))
            _print_dead([deadletters.row(e) for e in entries], args.json)
        elif args.action == "requeue":
            print(f"requeued {deadletters.requeue(broker, args.queue, ids)} dead letter(s) of {args.queue}")
        else:
            print(f"purged {deadletters.purge(broker, args.queue, ids)} dead letter(s) of {args.queue}")
    finally:
        broker.close()
    return EXIT_OK


def _print_dead(rows: list[dict[str, Any]], as_json: bool) -> None:
    """Dead letters as JSON lines (ASCII, strict) or as one escaped line each."""
    for row in rows:
        if as_json:
            print(json.dumps(row, ensure_ascii=True))
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["dead_at"])) if row["dead_at"] else "?"
        body = row["body"] if row["malformed"] or row.get("cut") else json.dumps(row["body"], ensure_ascii=False)
        print(f"{safe.escape(row['id'])}  {when}  attempts={row['attempts']}  "
              f"reason={safe.escape(row['reason'], 500)}  body={safe.escape(body, 200)}")
    if not as_json:
        print(f"{len(rows)} dead letter(s)", file=sys.stderr)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "check": cmd_check,
    "publish": cmd_publish,
    "consume": cmd_consume,
    "dlq": cmd_dlq,
    "status": cmd_status,
    "web": cmd_web,
    "pause": cli_queue.cmd_pause,
    "resume": cli_queue.cmd_resume,
    "messages": cli_queue.cmd_messages,
    "remove": cli_queue.cmd_remove,
    "schedules": cli_schedules.cmd_schedules,
}
