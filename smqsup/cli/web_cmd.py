"""``smqsup web``: serve the web UI, the JSON API and /metrics in the
foreground (the server is smqsup/web/), with the token read from a file, the
environment or the command line.

    smqsup web (-c FILE | --url URL) [--listen HOST:PORT] [--token-file FILE | --token TOKEN]
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Optional

from smqsup import defaults, safe
from smqsup.cli.common import BY_FILE_OR_URL, EXIT_OK, Commands, Parser, add_command, arg, nonempty, one_of, target
from smqsup.errors import UsageError

#: The command's logger: its lines name "smqsup", as they did when the whole
#: command was one module.
log = logging.getLogger("smqsup")

#: Longest token --token-file reads, in characters.
_TOKEN_FILE_MAX = 4096


def add_web(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup web``."""
    add_command(sub, "web", "serve the web UI, the JSON API and /metrics", *BY_FILE_OR_URL,
                arg("--listen", metavar="HOST:PORT", type=nonempty,
                    help=f"address to listen on (default: web.listen, else {defaults.WEB_LISTEN}; port 0: any free)"),
                one_of(arg("--token-file", metavar="FILE", type=nonempty,
                           help="read the token every request must carry from the first line of FILE "
                                "(default: $SMQSUP_WEB_TOKEN, else web.token); required to listen on a "
                                "non-loopback address"),
                       arg("--token", type=nonempty,
                           help="the token itself: other users see it in ps, prefer --token-file")))


def cmd_web(args: argparse.Namespace) -> int:
    """``smqsup web``: serve until SIGTERM or SIGINT; a line on stdout once listening."""
    from dataclasses import replace

    from smqsup.config import model as config_mod  # here, not at the top: see cli.common.config

    # main() has already put a title without the token or the url in place of
    # the command line; connect() registers the url's password for scrubbing.
    token = _web_token(args)
    url, namespace, _ = target(args)
    cfg = config_mod.load(args.config) if args.config else config_mod.from_url(url, namespace)
    web = cfg.web or config_mod.WebConfig()
    web = config_mod.WebConfig(listen=args.listen or web.listen, token=token or web.token)
    # Here, not at the top: the server imports aiohttp and the store, about
    # 300 ms (python -X importtime, after cli.main) that no other command needs.
    from smqsup.web import serve

    def ready(address: str) -> None:
        safe.set_title(f"smqsup: web {safe.escape(address, 100)}")
        print(f"smqsup web: listening on http://{address}/", flush=True)

    serve(replace(cfg, web=web), url, ready=ready)
    return EXIT_OK


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
    from smqsup.config.yamlfile import open_regular_file  # here, not at the top: it imports YAML

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
