"""Hostile command lines, files, environments and Producer arguments: each is
one line naming what is wrong (exit 2), never a hang, a traceback or a secret."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from smqsup import safe
from tests import procs
from tests.helpers import wait_for


def _one_line_error(r: "subprocess.CompletedProcess[str]", *parts: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("Error: "), r.stderr
    assert "Traceback" not in r.stderr
    for part in parts:
        assert part in r.stderr, r.stderr


# --- files that are not files ------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A FIFO nobody writes to: reading it would block for ever."""
    path = tmp_path / "queues.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [["check"], ["status"], ["publish", "q", "{}"], ["consume", "q"], []])
def test_a_fifo_as_config_is_refused_without_hanging(fifo: Path, command: list[str]) -> None:
    """-c FIFO: one line saying it is not a regular file, for every command and the supervisor."""
    args = [*command[:1], "-c", str(fifo), *command[1:]]
    _one_line_error(procs.run(*args, timeout=20), "not a regular file (a FIFO)")


def test_a_device_as_config_is_refused() -> None:
    """-c /dev/zero: not a regular file (a character device), not read at all."""
    _one_line_error(procs.run("check", "-c", "/dev/zero", timeout=20), "/dev/zero: not a regular file")


def test_a_fifo_as_token_file_is_refused_without_hanging(fifo: Path, redis_url: str) -> None:
    """web --token-file FIFO: one line, before anything listens."""
    r = procs.run("web", "--url", redis_url, "--listen", "127.0.0.1:0", "--token-file", str(fifo), timeout=20)
    _one_line_error(r, "--token-file", "not a regular file (a FIFO)")


def test_a_supervisor_reloading_a_config_replaced_by_a_fifo_keeps_running(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket) -> None:
    """SIGHUP after queues.yaml became a FIFO: the reload fails in one log line, the loop goes on."""
    sup = supervise({"q": {"handler": "tests.handlers:record"}}, notify)
    notify.wait("READY=1")
    sup.cfg.unlink()
    os.mkfifo(sup.cfg)
    sup.signal(signal.SIGHUP)
    wait_for(lambda: "not a regular file (a FIFO)" in sup.log(), message="reload stuck on the FIFO")
    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(30) == 0


# --- the embedded server's data directory --------------------------------------------------


def _embedded_config(tmp_path: Path, data_dir: str) -> Path:
    return procs.write_config(tmp_path / "queues.yaml", None, {"q": {"handler": "tests.handlers:record"}},
                              redis={"data_dir": data_dir})


@pytest.mark.parametrize("where", ["a file", "under a file", "under /proc"])
@pytest.mark.parametrize("command", [[], ["consume", "q"]])
def test_an_unusable_data_dir_is_one_line(tmp_path: Path, where: str, command: list[str]) -> None:
    """redis.data_dir naming a file, a path under a file, or an uncreatable path: one line, exit 2."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    data_dir = {"a file": str(a_file), "under a file": str(a_file / "sub"),
                "under /proc": "/proc/smqsup-no-such-dir"}[where]
    cfg = _embedded_config(tmp_path, data_dir)
    args = [*command[:1], "-c", str(cfg), *command[1:]]
    _one_line_error(procs.run(*args, timeout=30), data_dir, "cannot use it as the data directory")


def test_a_second_supervisor_on_one_data_dir_is_refused(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, tmp_path: Path) -> None:
    """Two supervisors, one embedded data dir: the second refuses to start (the first would stop
    its Redis under it), and the first keeps running."""
    data = tmp_path / "data"
    first = supervise({"q": {"handler": "tests.handlers:record"}}, notify, embedded=True,
                      redis={"data_dir": str(data)})
    notify.wait("READY=1")
    r = procs.run("-c", str(first.cfg), timeout=30)
    _one_line_error(r, "already run by process", "one supervisor per data dir")
    assert first.proc.poll() is None
    assert procs.run("publish", "-c", str(first.cfg), "q", "1").returncode == 0


# --- secrets in urls --------------------------------------------------------------------------


@pytest.mark.parametrize("url, secret", [
    ("redis://:p@ssWord99@localhost:0/0", "ssWord99"),
    ("redis://us@er:Secret99@localhost:0/0", "Secret99"),
])
def test_a_password_holding_an_at_sign_is_never_shown(url: str, secret: str) -> None:
    """A raw '@' in the userinfo: redis-py takes everything to the last '@' as the password; so does the mask."""
    r = procs.run("publish", "--url", url, "q", "{}")
    _one_line_error(r, "redis.url")
    assert secret not in r.stderr
    assert secret not in safe.mask_url(url) and secret not in safe.mask_url(f"see {url} there")
