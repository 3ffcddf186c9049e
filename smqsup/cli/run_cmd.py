"""``smqsup run``, ``check`` and ``consume``: the supervisor, the config
checked without starting anything, and one consumer in the foreground; each
reads its config from -c FILE.

    smqsup -c FILE                      run the supervisor (also: smqsup run -c FILE)
    smqsup check -c FILE                validate FILE and import its handlers
    smqsup consume -c FILE QUEUE        one consumer in the foreground
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from smqsup import logs
from smqsup.cli.common import BY_FILE, EXIT_OK, Commands, Parser, add_command, arg, config
from smqsup.errors import ConfigError

if TYPE_CHECKING:
    from smqsup.config.model import Config


def add_run_and_check(sub: Commands[Parser]) -> None:
    """The parsers of ``smqsup run`` and ``smqsup check``."""
    add_command(sub, "run", "run the supervisor", *BY_FILE)
    add_command(sub, "check", "validate the config and import its handlers", *BY_FILE)


def add_consume(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup consume``."""
    add_command(sub, "consume", "run one consumer of QUEUE in the foreground", *BY_FILE, arg("queue"))


def cmd_run(args: argparse.Namespace) -> int:
    """``smqsup run``: the supervisor, until it is told to stop."""
    cfg = config(args)
    _log_format(args, cfg)
    # Here, not at the top: the supervisor imports the store (redis-py) and
    # its children's modules, about 200 ms (python -X importtime, after
    # cli.main) that no other command needs.
    from smqsup.supervisor.arbiter import run_supervisor

    return run_supervisor(cfg)


def cmd_check(args: argparse.Namespace) -> int:
    """``smqsup check``: validate the config and import its handlers; one line saying what it holds."""
    cfg = config(args)
    # Here, not at the top: worker.handlers imports the consumer engine (and
    # so redis-py), which a bad config's error and `smqsup --help` do not need.
    from smqsup.worker.handlers import check_handlers

    check_handlers(cfg)
    schedules = f", {len(cfg.schedules)} schedule(s)" if cfg.schedules else ""
    print(f"{cfg.path}: ok ({len(cfg.queues)} queue(s), "
          f"{sum(q.consumers for q in cfg.queues.values())} consumer(s){schedules})")
    return EXIT_OK


def cmd_consume(args: argparse.Namespace) -> int:
    """``smqsup consume``: one consumer of a configured queue, in the foreground."""
    cfg = config(args)
    _log_format(args, cfg)
    if args.queue not in cfg.queues:
        raise ConfigError(f"{cfg.path}: queues.{args.queue}: no such queue in the config "
                          f"(queues: {', '.join(sorted(cfg.queues))})")
    # Here, not at the top: the consumer imports the store, and so redis-py
    # (see cli.common.connect).
    from smqsup.worker.standalone import consume

    return consume(cfg, args.queue)


def _log_format(args: argparse.Namespace, cfg: Config) -> None:
    """The config's log_format, unless --log-format said one (cli.main set that up)."""
    if args.log_format is None and cfg.log_format != "text":
        logs.setup(args.log_level, cfg.log_format)
