"""``smqsup schedules``: list the schedules stored in Redis (what the elected
collectors fire), pause or resume one on every host, or reset one's state.

    smqsup schedules (-c FILE | --url URL) [--json]
    smqsup schedules (-c FILE | --url URL) pause NAME
    smqsup schedules (-c FILE | --url URL) resume NAME
    smqsup schedules (-c FILE | --url URL) reset NAME

Redis is reached as ``smqsup dlq`` does (cli._target). A schedule NAME is
looked up in FILE first, then among the definitions stored for the
configured and known queues. Every value shown comes from Redis, which
anybody may have written: it is escaped to one bounded line.
"""

from __future__ import annotations

import argparse
import json
import socket
from typing import TYPE_CHECKING, Any, Optional

from smqsup import safe

if TYPE_CHECKING:
    from smqsup.cli.main import _Commands, _Parser
    from smqsup.config.model import Config
    from smqsup.store.broker import Broker

EXIT_OK = 0
_ACTIONS = ("list", "pause", "resume", "reset")
#: Widest cell shown, in characters.
_CELL_CHARS = 60


def add_schedules(sub: _Commands[_Parser]) -> None:
    from smqsup.cli.main import _add_target

    p = sub.add_parser("schedules", help="list the schedules (last and next fire), or pause, resume or reset one",
                       description="Without an action, list every schedule stored in Redis for the configured "
                                   "and known queues: its queue, cron or period, time zone, paused flag, last "
                                   "and next fire, and how many supervisors declare it now. pause NAME stops "
                                   "it firing on every host until resume NAME (the slots in between are "
                                   "skipped, catch_up or not). reset NAME settles its state up to now: for "
                                   "a state written by a clock that was ahead, under which it fires nothing "
                                   "until the clock gets there (the slots up to now are not fired).")
    _add_target(p, url=True)
    p.add_argument("action", nargs="?", default="list", type=_action, metavar="{list,pause,resume,reset}")
    p.add_argument("name", nargs="?", metavar="NAME", help="the schedule to pause, resume or reset")
    p.add_argument("--json", action="store_true", help="one JSON object per schedule and line")


def _action(text: str) -> str:
    if text not in _ACTIONS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(_ACTIONS)}, got {safe.escape(repr(text), 60)}")
    return text


def cmd_schedules(args: argparse.Namespace) -> int:
    from smqsup.config.validate import queue_or_namespace
    from smqsup.errors import UsageError

    if args.action == "list":
        if args.name is not None:
            raise UsageError("smqsup schedules: list takes no NAME")
        return _list(args)
    if args.name is None:
        raise UsageError(f"smqsup schedules {args.action}: give the schedule's NAME")
    name = queue_or_namespace(args.name, "NAME", f"smqsup schedules {args.action}")
    with _connected(args) as (broker, cfg):
        queue = _queue_of(broker, cfg, name)
        from smqsup.store import schedules as schedule_store

        if args.action == "pause":
            if schedule_store.pause(broker, queue, name, by=f"cli@{socket.gethostname()}"):
                print(f"paused schedule {name} (queue {queue}): it fires on no host until "
                      f"`smqsup schedules resume {name}`")
            else:
                print(f"schedule {name} was already paused ({_paused_text(broker, queue, name)}); nothing changed")
        elif args.action == "reset":
            print(_reset(broker, queue, name))
        elif schedule_store.resume(broker, queue, name):
            print(f"resumed schedule {name} (queue {queue}): it fires again from its next slot")
        else:
            print(f"schedule {name} was not paused; nothing changed")
    return EXIT_OK


class _connected:
    """(Broker, the config or None) for the command's Redis."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def __enter__(self) -> tuple[Broker, Optional[Config]]:
        from smqsup.cli.main import _target
        from smqsup.config import model as config_mod
        from smqsup.store.broker import Broker

        url, namespace, _ = _target(self.args)
        self.cfg = config_mod.load(self.args.config) if self.args.config else None
        self.broker = Broker(url, namespace, client_name="smqsup-schedules")
        return self.broker, self.cfg

    def __exit__(self, *exc: object) -> None:
        self.broker.close()


def _queues(broker: Broker, cfg: Optional[Config]) -> list[str]:
    from smqsup.store.schedules import valid_name

    known = {q for q in broker.known_queues() if valid_name(q)}
    return sorted(known | set(cfg.queues if cfg else ()))


def _queue_of(broker: Broker, cfg: Optional[Config], name: str) -> str:
    """The queue of schedule ``name``: the config's, else the one queue whose
    stored definitions hold it; a one-line error otherwise."""
    from smqsup.errors import UsageError
    from smqsup.store import schedules as schedule_store

    if cfg is not None and name in cfg.schedules:
        return cfg.schedules[name].queue
    found = schedule_store.stored_queues(broker, _queues(broker, cfg), name)
    if len(found) == 1:
        return found[0]
    if not found:
        where = f"in {cfg.path} nor " if cfg is not None else ""
        raise UsageError(f"smqsup schedules: no schedule {name} {where}in Redis (namespace {broker.namespace})")
    raise UsageError(f"smqsup schedules: schedule {name} is stored on queues {', '.join(found)}: give -c FILE "
                     f"naming the one meant")


def _reset(broker: Broker, queue: str, name: str) -> str:
    """Settle schedule ``name`` up to now; what was done, in a line."""
    from smqsup.cli.queue import _when
    from smqsup.store import schedules as schedule_store

    stored, now_ms, ahead_ms = schedule_store.reset(broker, queue, name)
    if not stored:
        return f"schedule {name} is not stored in Redis on queue {queue}; nothing changed"
    was = (f"its state was {ahead_ms / 86_400_000:.1f} days ahead of the Redis clock" if ahead_ms > 0
           else "its state was not ahead of the Redis clock")
    return (f"reset schedule {name} (queue {queue}): settled up to now ({_when(now_ms / 1000)}), {was}; "
            f"it fires from its next slot")


def _paused_text(broker: Broker, queue: str, name: str) -> str:
    from smqsup.cli.queue import _when
    from smqsup.store import schedules as schedule_store

    info = schedule_store.paused_info(broker, queue, name)
    at_ms, by = info.get("at_ms"), info.get("by")
    at = "?"
    if isinstance(at_ms, (int, float)) and not isinstance(at_ms, bool) and 0 <= at_ms < 1e15:
        at = _when(at_ms / 1000)
    return (f"since {at} "
            f"by {safe.escape(by, 200) if isinstance(by, str) else '?'}")


def _list(args: argparse.Namespace) -> int:
    from smqsup import defaults
    from smqsup.store import schedules as schedule_store

    with _connected(args) as (broker, cfg):
        # The file's max_message_size, else the default: the supervisors' own are not in Redis.
        limit = cfg.max_message_size_bytes if cfg else defaults.MAX_MESSAGE_SIZE_BYTES
        rows = schedule_store.rows(broker, _queues(broker, cfg), limit)
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


def when_text(r: dict[str, Any]) -> str:
    """cron EXPR or every Ns, from a schedule row."""
    if r.get("cron") is not None:
        return f"cron {r['cron']}"
    from smqsup.config.schedule import duration_text

    every = r.get("every_s")
    return "-" if not isinstance(every, (int, float)) else f"every {duration_text(round(every * 1000))}"


def render(rows: list[dict[str, Any]]) -> str:
    """Schedule rows as an aligned table; its problem under a row that has one."""
    from smqsup.cli.queue import _when

    if not rows:
        return "no schedules"
    table = [("schedule", "queue", "when", "zone", "paused", "last fire", "next fire", "declared by", "fires")]
    notes = []
    for r in rows:
        table.append((_cell(r["name"]), _cell(r["queue"]), _cell(when_text(r)), _cell(r.get("timezone") or "-"),
                      "paused" if r["paused"] else "-", _when(r["last_fire"]) if r["last_fire"] else "-",
                      _when(r["next_fire"]) if r["next_fire"] else "-", str(r["declarers"]),
                      "-" if r["fires"] is None else str(r["fires"])))
        if r.get("error"):
            notes.append(f"  {_cell(r['name'])}: {safe.escape(r['error'], 300)}")
        elif not r["declarers"]:
            notes.append(f"  {_cell(r['name'])}: no supervisor declares it now: not fired")
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    return "\n".join(lines + notes)


def _cell(value: Any) -> str:
    return safe.escape("-" if value is None else value, _CELL_CHARS)
