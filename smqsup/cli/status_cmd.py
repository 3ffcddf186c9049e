"""``smqsup status``: queue sizes, rates, consumers and collector leaders,
once or every few seconds, as a table or JSON (the view is views/status.py).

    smqsup status (-c FILE | --url URL) [--json] [--watch [SECONDS]]
"""

from __future__ import annotations

import argparse

from smqsup.cli.common import BY_FILE_OR_URL, Commands, Parser, add_command, arg, config, connect, seconds, target


def add_status(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup status``."""
    add_command(sub, "status", "queue sizes, rates, consumers, collector leaders", *BY_FILE_OR_URL,
                arg("--json", action="store_true", help="one JSON document (per refresh)"),
                arg("--watch", nargs="?", type=seconds, const=2.0, default=None, metavar="SECONDS",
                    help="refresh every SECONDS (default 2) until Ctrl-C"))


def cmd_status(args: argparse.Namespace) -> int:
    """``smqsup status``: print the status of the configured and known queues."""
    url, namespace, _ = target(args)
    queues = sorted(config(args).queues) if args.config else []
    # Here, after the config's errors: the view imports the store, and so
    # redis-py (see cli.common.connect).
    from smqsup.views import status

    broker = connect(url, namespace, client_name="smqsup-status")
    try:
        return status.run(broker, queues, as_json=args.json, watch=args.watch)
    finally:
        broker.close()
