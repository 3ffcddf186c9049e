"""The ``smqsup`` command starts light: --help, a command's --help and a bad
config's one-line error import neither redis-py, aiohttp, psutil nor the
supervisor, and the help they print is the help recorded in cli_help.txt.

Re-record the help after a deliberate change with ``python -m tests.test_cli_startup``.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from smqsup.cli import main as cli
from tests.support import procs

FIXTURE = Path(__file__).resolve().parent / "cli_help.txt"
#: The terminal width the help is formatted for (argparse reads $COLUMNS).
COLUMNS = "80"
#: The Python whose argparse formatted the fixture (3.13 lays options out otherwise).
RECORDED_WITH = (3, 11)
BAD_CONFIG = Path(__file__).resolve().parent / "configs" / "bad" / "consumers_word.yaml"
#: What no command needs before it reaches Redis: none of it may load to print help or a config error
#: (the producer and the views reach Redis through the store: banning it bans them).
HEAVY = ("redis", "hiredis", "aiohttp", "psutil", "opentelemetry", "asyncio", "smqsup.store",
         "smqsup.worker", "smqsup.collector", "smqsup.web", "smqsup.supervisor")
#: What --help does not need either: the config's reader (YAML, the sections, cron and time zones).
CONFIG = ("yaml", "smqsup.config.model", "smqsup.config.schedule")


def _help(argv: list[str]) -> str:
    """What ``smqsup ARGV`` (ending in --help) prints, from this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
        cli.main(argv)
    assert ended.value.code == 0
    return out.getvalue()


def _every_help() -> str:
    """`smqsup --help` and each command's --help, each after a line naming it."""
    commands = [a for a in cli.build_parser()._actions if a.dest == "command"][0].choices
    assert commands is not None
    return "".join(f"$ smqsup {' '.join(argv)}\n{_help(argv)}"
                   for argv in [["--help"], *([name, "--help"] for name in commands)])


@pytest.mark.skipif(sys.version_info[:2] != RECORDED_WITH, reason="argparse of another Python formats otherwise")
def test_every_help_is_the_recorded_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """`smqsup --help` and every command's --help print what they printed when cli_help.txt was recorded."""
    monkeypatch.setenv("COLUMNS", COLUMNS)
    assert _every_help() == FIXTURE.read_text()


def _imported(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``python -X importtime -m smqsup ARGV``; its result and every module it imported."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "smqsup", *argv], env=procs.env(),
                       capture_output=True, text=True, timeout=60)
    lines = [line for line in r.stderr.splitlines() if line.startswith("import time:")]
    return r, {line.rpartition("|")[2].strip() for line in lines}


def _heavy(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in prefixes or m.startswith(tuple(p + "." for p in prefixes)))


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["publish", "--help"], ["web", "--help"]])
def test_help_imports_neither_redis_nor_the_config(argv: list[str]) -> None:
    """Printing help loads no Redis client, web server, supervisor, psutil, nor the config reader."""
    r, modules = _imported(*argv)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _heavy(modules, HEAVY + CONFIG) == []


@pytest.mark.parametrize("argv", [["check"], ["run"], ["consume", "q"], ["status"], ["roll"], ["web"],
                                  ["schedules"], ["dlq", "list", "q"], ["messages", "q"], ["remove", "q", "m1"],
                                  ["cancel", "q", "m1"], ["pause", "q"], ["publish", "q", "1"]])
def test_a_bad_config_error_imports_no_redis(argv: list[str]) -> None:
    """A bad config's one-line error (exit 2) comes before any Redis client, server or supervisor is loaded."""
    r, modules = _imported(argv[0], "-c", str(BAD_CONFIG), *argv[1:])
    assert r.returncode == 2 and "queues.orders.consumers" in r.stderr, r.stderr[-2000:]
    assert _heavy(modules, HEAVY) == []


if __name__ == "__main__":
    os.environ["COLUMNS"] = COLUMNS
    FIXTURE.write_text(_every_help())
    print(f"recorded {FIXTURE}")
