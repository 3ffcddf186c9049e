"""The embedded redis-server: started and stopped by the supervisor, reached by
`publish -c`, adopted after its owner died."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import psutil

from smqsup.launch.discovery import running_url
from tests.support import procs
from tests.support.helpers import wait_for


def test_a_new_supervisor_adopts_the_server_its_killed_predecessor_left(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, tmp_path: Path) -> None:
    """Supervisor SIGKILLed: its redis-server lives on with the data; the next one adopts it and stops it last."""
    data = tmp_path / "data"
    queues = {"q": {"handler": "tests.support.handlers:record"}}
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


def test_embedded_redis_is_started_reached_by_publish_and_stopped_last(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, out_dir: Path, tmp_path: Path) -> None:
    """No redis.url: the supervisor runs its own redis-server, `publish -c` reaches it, SIGTERM stops it (exit 0)."""
    data_dir = tmp_path / "data"
    sup = supervise({"q": {"handler": "tests.support.handlers:record"}}, notify, embedded=True,
                    redis={"data_dir": str(data_dir)})
    notify.wait("READY=1")
    assert running_url(data_dir) is not None
    server_pid = int((data_dir / "redis.pid").read_text())
    assert server_pid in sup.processes()  # the supervisor's own child

    r = procs.run("publish", "-c", str(sup.cfg), "q", '{"n": 1}', env=procs.env(out_dir))
    assert r.returncode == 0, r.stderr
    mid = r.stdout.strip()
    wait_for(lambda: [e for e in sup.events("done") if e["id"] == mid])

    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(15) == 0
    assert running_url(data_dir) is None and procs.gone(server_pid)
    r = procs.run("publish", "-c", str(sup.cfg), "q", '{"n": 2}')
    assert r.returncode == 2 and "no embedded redis-server is running" in r.stderr
