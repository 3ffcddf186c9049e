"""``smqsup roll``: roll the queues of a running supervisor whatever their
code, without knowing its pid.

    smqsup roll -c FILE [QUEUE...]

It finds the supervisors of this host that run FILE (their process title
names it; a relative name is resolved against their working directory; only
processes of this user are taken, and as root those of another user that
the queues' supervisors hashes in Redis name as live supervisors of this
host: the service's, which a local user without Redis cannot forge),
leaves the queues to roll in Redis for each (store/ops/control.py), sends it
SIGUSR1 and waits until it took the request. The supervisor rolls them one
consumer at a time, as a reload rolls changed code.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from smqsup.cli.common import Commands, Parser, add_command, arg, config, connect, nonempty
from smqsup.errors import SmqsupError, UsageError
from smqsup.safe import escape

if TYPE_CHECKING:
    import psutil

#: A supervisor's process title, before its config file's name (supervisor/arbiter.py).
TITLE = "smqsup: supervisor -c "
#: How long the command waits for each supervisor to take its request, in seconds.
TAKE_TIMEOUT_S = 5.0


def add_roll(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup roll``."""
    add_command(sub, "roll", "roll a running supervisor's consumers, one at a time (no pid needed)",
                arg("-c", "--config", metavar="FILE", type=nonempty, help="the queues.yaml the supervisor runs"),
                arg("queues", nargs="*", metavar="QUEUE", help="the queues to roll (default: every queue)"))


def supervisors(path: str, vouched: Collection[int] = ()) -> tuple[list[int], list[str]]:
    """The pids of this host's supervisors whose config file is ``path``
    that this user may signal, and a note for each process titled as one
    that is not signalled (another user's).

    A title is no proof: anyone can take it (``exec -a``). Only processes of
    our own user are taken; as root, also another user's whose pid is in
    ``vouched`` (the live supervisors Redis names on this host: a service
    running as its own user, its config owned by root). Never one whose
    parent is itself taken (a consumer forked by an older smqsup before it
    set its own title)."""
    import psutil  # here, not at the top: only `roll` reads the process table

    wanted = os.path.realpath(path)
    uid = os.geteuid()
    found: dict[int, int] = {}
    refused: list[str] = []
    for proc in psutil.process_iter(["cmdline", "uids", "ppid"]):
        try:
            line = " ".join(proc.info["cmdline"] or []).strip()
            if not line.startswith(TITLE) or proc.pid == os.getpid():
                continue
            if set(proc.info["uids"]) != {uid} and not (uid == 0 and proc.pid in vouched):
                refused.append(f"process {proc.pid} of user {escape(proc.username(), 64)}")
                continue
            if _named(proc, line[len(TITLE):]) == wanted:
                found[proc.pid] = proc.info["ppid"]
        except (psutil.Error, OSError, TypeError):  # gone meanwhile, or another user's working directory
            continue
    return sorted(pid for pid, ppid in found.items() if ppid not in found), refused


def _named(proc: psutil.Process, named: str) -> str:
    """The file a supervisor's title means, resolved (a relative name, as
    older supervisors' titles have, against its working directory)."""
    return os.path.realpath(named if os.path.isabs(named) else os.path.join(proc.cwd(), named))


def cmd_roll(args: argparse.Namespace) -> int:
    """``smqsup roll``: ask each supervisor running FILE here to roll QUEUEs (all by default)."""
    cfg = config(args)
    names = list(dict.fromkeys(args.queues)) or None
    for name in names or ():
        if name not in cfg.queues:
            raise UsageError(f"{cfg.path}: no queue {escape(name, 200)!r} (its queues: {', '.join(cfg.queues)})")
    from smqsup.launch.embedded import redis_url  # here, after the config's errors: it imports psutil

    pids, refused = supervisors(str(cfg.path))
    if not pids and not refused:
        raise SmqsupError(f"no smqsup supervisor runs {cfg.path} on this host (is it started?)")
    broker = connect(redis_url(cfg), cfg.namespace, client_name="smqsup-roll")
    host = socket.gethostname()
    try:
        if refused and os.geteuid() == 0:  # another user's: taken if Redis names it (the service's user)
            pids, refused = supervisors(str(cfg.path), broker.supervisors.live_pids(cfg.queues, host))
        if not pids:
            others = f"; not signalled: {', '.join(refused[:5])} (another user's)" if refused else ""
            raise SmqsupError(f"no smqsup supervisor runs {cfg.path} on this host (is it started?){others}")
        for pid in pids:
            raw = broker.control.ask_roll(host, pid, names)
            try:
                _signal(pid)
            except SmqsupError:
                broker.control.withdraw_roll(host, pid, raw)
                raise
            deadline = time.monotonic() + TAKE_TIMEOUT_S
            while not broker.control.roll_taken(host, pid, raw):
                if time.monotonic() >= deadline:
                    broker.control.withdraw_roll(host, pid, raw)  # never left to widen a later roll
                    raise SmqsupError(f"supervisor {pid} did not take the roll request within {TAKE_TIMEOUT_S:g}s")
                time.sleep(0.05)  # a command waiting on another process, not a test
            print(f"supervisor {pid}: rolling {', '.join(names) if names else 'every queue'} "
                  "(one consumer at a time; see its log or smqsup status)")
    finally:
        broker.close()
    return 0


def _signal(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise SmqsupError(f"supervisor {pid} stopped before it could be asked to roll") from None
    except PermissionError:
        raise SmqsupError(f"not allowed to signal supervisor {pid}: run smqsup roll as its user, or root") from None
