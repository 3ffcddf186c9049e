"""The embedded redis-server: owned by the supervisor, adopted after its owner died."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import psutil

from smqsup.redis_server import running_url
from tests import procs
from tests.helpers import wait_for


def test_a_new_supervisor_adopts_the_server_its_killed_predecessor_left(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, tmp_path: Path) -> None:
    """Supervisor SIGKILLed: its redis-server lives on with the data; the next one adopts it and stops it last."""
    data = tmp_path / "data"
    queues = {"q": {"handler": "tests.handlers:record"}}
    first = supervise(queues, notify, embedded=True, redis={"data_dir": str(data), "appendfsync": "always"})
    notify.wait("READY=1")
    r = procs.run("publish", "-c", str(first.cfg), "q", '"kept"')
    assert r.returncode == 0, r.stderr
    server_pid = int((data / "redis.pid").read_text())
    first.signal(signal.SIGKILL)
    first.proc.wait(10)
    assert running_url(data) is not None  # the server outlived its owner
    mark = len(notify.poll())
    second = supervise(queues, notify, embedded=True, redis={"data_dir": str(data), "appendfsync": "always"})
    notify.wait("READY=1", mark)
    assert "adopting the embedded redis-server" in second.log()
    assert int((data / "redis.pid").read_text()) == server_pid
    second.signal(signal.SIGTERM)
    assert second.proc.wait(20) == 0
    wait_for(lambda: not psutil.pid_exists(server_pid) or psutil.Process(server_pid).status() == "zombie",
             message="adopted server not stopped")
    assert running_url(data) is None
