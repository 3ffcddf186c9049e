"""``smqsup schedules``: list the schedules stored in Redis (what the elected
collectors fire), pause or resume one on every host, or reset one's state.

    smqsup schedules (-c FILE | --url URL) [--json]
    smqsup schedules (-c FILE | --url URL) pause NAME
    smqsup schedules (-c FILE | --url URL) resume NAME
    smqsup schedules (-c FILE | --url URL) reset NAME

Redis is reached as ``smqsup dlq`` does (cli.common.target). A schedule NAME is
looked up in FILE first, then among the definitions stored for the
configured and known queues. Every value shown comes from Redis, which
anybody may have written: it is escaped to one bounded line.
"""

from __future__ import annotations

import argparse
import json
import socket
from typing import TYPE_CHECKING, Optional

from smqsup import defaults, safe
from smqsup.cli.common import (
    BY_FILE_OR_URL,
    EXIT_OK,
    Commands,
    Parser,
    add_command,
    arg,
    config,
    connect,
    target,
)
from smqsup.config.names import queue_or_namespace
from smqsup.errors import UsageError
from smqsup.views.text import local_time, paused_since

if TYPE_CHECKING:
    from smqsup.config.model import Config
    from smqsup.store.broker import Broker

_ACTIONS = ("list", "pause", "resume", "reset")


def add_schedules(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup schedules``."""
    add_command(sub, "schedules", "list the schedules (last and next fire), or pause, resume or reset one",
                *BY_FILE_OR_URL,
                arg("action", nargs="?", default="list", type=_action, metavar="{list,pause,resume,reset}"),
                arg("name", nargs="?", metavar="NAME", help="the schedule to pause, resume or reset"),
                arg("--json", action="store_true", help="one JSON object per schedule and line"),
                description="Without an action, list every schedule stored in Redis for the configured "
                            "and known queues: its queue, cron or period, time zone, paused flag, last "
                            "and next fire, and how many supervisors declare it now. pause NAME stops "
                            "it firing on every host until resume NAME (the slots in between are "
                            "skipped, catch_up or not). reset NAME settles its state up to now: for "
                            "a state written by a clock that was ahead, under which it fires nothing "
                            "until the clock gets there (the slots up to now are not fired).")


def _action(text: str) -> str:
    if text not in _ACTIONS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(_ACTIONS)}, got {safe.escape(repr(text), 60)}")
    return text


def cmd_schedules(args: argparse.Namespace) -> int:
    """``smqsup schedules``: list them, or pause, resume or reset one."""
    if args.action == "list":
        if args.name is not None:
            raise UsageError("smqsup schedules: list takes no NAME")
        return _list(args)
    if args.name is None:
        raise UsageError(f"smqsup schedules {args.action}: give the schedule's NAME")
    name = queue_or_namespace(args.name, "NAME", f"smqsup schedules {args.action}")
    with _connected(args) as (broker, cfg):
        print(_act(args.action, broker, _queue_of(broker, cfg, name), name))
    return EXIT_OK


def _act(action: str, broker: Broker, queue: str, name: str) -> str:
    """Pause, resume or reset schedule ``name`` of ``queue``; what was done, in a line."""
    if action == "pause":
        if broker.schedules.pause(queue, name, by=f"cli@{socket.gethostname()}"):
            return f"paused schedule {name} (queue {queue}): it fires on no host until `smqsup schedules resume {name}`"
        since = paused_since(broker.schedules.paused_info(queue, name))
        return f"schedule {name} was already paused ({since}); nothing changed"
    if action == "reset":
        return _reset_text(name, queue, *broker.schedules.reset(queue, name))
    if broker.schedules.resume(queue, name):
        return f"resumed schedule {name} (queue {queue}): it fires again from its next slot"
    return f"schedule {name} was not paused; nothing changed"


class _connected:
    """(Broker, the config or None) for the command's Redis."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def __enter__(self) -> tuple[Broker, Optional[Config]]:
        url, namespace, _ = target(self.args)
        self.cfg = config(self.args) if self.args.config else None
        self.broker = connect(url, namespace, client_name="smqsup-schedules")
        return self.broker, self.cfg

    def __exit__(self, *exc: object) -> None:
        self.broker.close()


def _queues(broker: Broker, cfg: Optional[Config]) -> list[str]:
    # Here, not at the top: the store imports redis-py (see cli.common.connect).
    from smqsup.store.ops.schedules import valid_name

    known = {q for q in broker.queues.known_queues() if valid_name(q)}
    return sorted(known | set(cfg.queues if cfg else ()))


def _queue_of(broker: Broker, cfg: Optional[Config], name: str) -> str:
    """The queue of schedule ``name``: the config's, else the one queue whose
    stored definitions hold it; a one-line error otherwise."""
    if cfg is not None and name in cfg.schedules:
        return cfg.schedules[name].queue
    found = broker.schedules.stored_queues(_queues(broker, cfg), name)
    if len(found) == 1:
        return found[0]
    if not found:
        where = f"in {cfg.path} nor " if cfg is not None else ""
        raise UsageError(f"smqsup schedules: no schedule {name} {where}in Redis (namespace {broker.namespace})")
    raise UsageError(f"smqsup schedules: schedule {name} is stored on queues {', '.join(found)}: give -c FILE "
                     f"naming the one meant")


def _reset_text(name: str, queue: str, stored: bool, now_ms: int, ahead_ms: int) -> str:
    """What settling schedule ``name`` up to now did (store.schedules.reset's answer), in a line."""
    if not stored:
        return f"schedule {name} is not stored in Redis on queue {queue}; nothing changed"
    was = (f"its state was {ahead_ms / 86_400_000:.1f} days ahead of the Redis clock" if ahead_ms > 0
           else "its state was not ahead of the Redis clock")
    return (f"reset schedule {name} (queue {queue}): settled up to now ({local_time(now_ms / 1000)}), {was}; "
            f"it fires from its next slot")


def _list(args: argparse.Namespace) -> int:
    # Here, not at the top: the view imports the config's schedule module (cron, time zones).
    from smqsup.views.schedule_table import render

    with _connected(args) as (broker, cfg):
        # The file's max_message_size, else the default: the supervisors' own are not in Redis.
        limit = cfg.max_message_size_bytes if cfg else defaults.MAX_MESSAGE_SIZE_BYTES
        rows = broker.schedules.rows(_queues(broker, cfg), limit)
    stored = {(r["queue"], r["name"]) for r in rows}
    for s in (cfg.schedules.values() if cfg else ()):
        if (s.queue, s.name) not in stored:  # in the file, not declared yet (no supervisor of it has run)
            rows.append({"name": s.name, "queue": s.queue, "cron": s.cron,
                         "every_s": None if s.every_ms is None else s.every_ms / 1000, "timezone": s.timezone,
                         "catch_up": s.catch_up, "paused": False, "error": "not stored in Redis yet",
                         "last_fire": None, "fired_at": None, "fires": None, "next_fire": None, "declarers": 0})
    if args.json:
        for r in rows:
            print(json.dumps(r, ensure_ascii=True, allow_nan=False))
        return EXIT_OK
    print(render(rows))
    return EXIT_OK
