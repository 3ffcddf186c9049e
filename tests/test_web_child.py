"""The web: section: the supervisor runs the web UI as its own supervised child."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Callable

import psutil

from smqsup.launch.discovery import free_port
from tests.support import procs
from tests.support.helpers import wait_for


def _get(port: int, path: str) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def _web_child(sup: procs.Supervisor) -> int:
    for k in psutil.Process(sup.pid).children():
        try:
            if "smqsup: web" in " ".join(k.cmdline()) and k.status() != psutil.STATUS_ZOMBIE:
                return k.pid
        except psutil.NoSuchProcess:
            pass
    return 0


def _answers(port: int) -> bool:
    try:
        return "queues" in _get(port, "/api/status")
    except OSError:
        return False


def test_supervisor_runs_restarts_and_stops_the_web_ui(supervise: Callable[..., procs.Supervisor],
                                                        notify: procs.NotifySocket) -> None:
    """With web:, the UI answers; killed, it is restarted; on SIGTERM it stops with the supervisor."""
    port = free_port()
    sup = supervise({"q": {"handler": "tests.support.handlers:record"}}, notify, web={"listen": f"127.0.0.1:{port}"})
    notify.wait("READY=1")
    first = wait_for(lambda: _web_child(sup), message="no web child")
    wait_for(lambda: _answers(port), message="web UI does not answer")
    assert "q" in _get(port, "/api/status")["queues"]  # type: ignore[operator]
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (lambda p: p if p and p != first else 0)(_web_child(sup)), timeout_s=10)
    wait_for(lambda: _answers(port), message="restarted web UI does not answer")
    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(20) == 0
    assert not psutil.pid_exists(second) or psutil.Process(second).status() == psutil.STATUS_ZOMBIE
    assert "web UI (pid %d) killed by signal 9" % first in sup.log()
