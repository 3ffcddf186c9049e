"""Another local user against the service's own files and processes (real
supervisors, a real second user, ``nobody``): the consumers' report
directory made again by that user after a /tmp cleaner removed it, planted
links, FIFOs and files, and the report directories a SIGKILLed supervisor
left behind."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from smqsup.client.producer import Producer
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

Supervise = Callable[..., procs.Supervisor]

#: The second local user the hostile steps run as.
OTHER = "nobody"


def as_other(code: str) -> None:
    """Run ``code`` (Python, the system's interpreter) as the other local user, as an attacker would."""
    subprocess.run(["/usr/bin/python3", "-c", code], user=OTHER, group="nogroup", cwd="/", check=True,
                   timeout=60, stdin=subprocess.DEVNULL)


def report_dirs(pid: int) -> list[str]:
    """The report directories of supervisor ``pid`` under the temp directory (ours, not planted)."""
    found = glob.glob(os.path.join(tempfile.gettempdir(), f"smqsup-{pid}-*"))
    return [d for d in found if os.lstat(d).st_uid == os.getuid()]


_PLANTS = {
    # links to a root-owned file at every name a new consumer might write
    "links": "os.mkdir(D); os.chmod(D, 0o777)\n"
             "for p in range(A, A + 2000):\n"
             "    os.symlink(T, f'{D}/{p}.json'); os.symlink(T, f'{D}/{p}.json.tmp')",
    # FIFOs nobody reads: open() for writing blocks for ever
    "fifos": "os.mkdir(D); os.chmod(D, 0o777)\n"
             "for p in range(A, A + 2000):\n"
             "    os.mkfifo(f'{D}/{p}.json'); os.mkfifo(f'{D}/{p}.json.tmp')",
    # a plain file where the directory was
    "file": "open(D, 'w').write('x')",
}


@pytest.mark.parametrize("plant", sorted(_PLANTS))
def test_a_report_dir_made_again_by_another_user_is_never_used(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path, redis_url: str, plant: str) -> None:
    """A cleaner removes the report dir, nobody makes it again (0777, links, FIFOs, a file): nothing written, queue runs."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    [first] = sup.consumers_by_queue()["q"]
    [path] = report_dirs(sup.pid)
    precious = tmp_path / "precious"
    precious.write_text("root's own\n")
    precious.chmod(0o644)
    subprocess.run(["rm", "-rf", path], check=True)  # a /tmp cleaner, as root
    low = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    as_other(f"import os\nD, T, A = {path!r}, {str(precious)!r}, {low}\n" + _PLANTS[plant])
    try:
        _survives(sup, redis_url, first, plant)
        assert precious.read_text() == "root's own\n"
        if plant != "file":
            assert all(os.path.islink(e) or not os.path.isfile(e) for e in glob.glob(path + "/*"))
        [now] = report_dirs(sup.pid)
        info = os.stat(now)
        assert now != path and info.st_mode & 0o777 == 0o700
        assert "report directory" in sup.log()
    finally:
        subprocess.run(["rm", "-rf", path], check=True)


def _survives(sup: procs.Supervisor, redis_url: str, first: int, plant: str) -> None:
    """A consumer killed now is replaced, the new one gets ready and handles a message; the supervisor says why."""
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: (new := sup.only_child()) not in (None, first) and f"(pid {new}) ready" in sup.log(),
             timeout_s=20, message="no new consumer got ready")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"after": plant})
        wait_for(lambda: any(e["id"] == mid for e in sup.events("done")), timeout_s=15)
    assert sup.proc.poll() is None


def test_the_report_dir_goes_on_every_exit_and_a_killed_ones_at_the_next_start(
        supervise: Supervise, notify: NotifySocket) -> None:
    """Clean stop: its dir goes; SIGKILL: left, then removed by the next start; another user's dir stays."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    [mine] = report_dirs(sup.pid)
    sup.stop()
    assert not os.path.exists(mine)

    mark = len(notify.poll())
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1", mark)
    [killed] = report_dirs(sup.pid)
    sup.kill_group()
    wait_for(lambda: procs.gone(sup.pid) and not sup.children())
    assert os.path.isdir(killed)
    theirs = os.path.join(tempfile.gettempdir(), "smqsup-1-nobodys")
    as_other(f"import os; os.mkdir({theirs!r}, 0o700)")
    try:
        mark = len(notify.poll())
        again = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
        notify.wait("READY=1", mark)
        assert not os.path.exists(killed)
        assert os.path.isdir(theirs) and len(report_dirs(again.pid)) == 1
    finally:
        os.rmdir(theirs)


# --- the embedded redis-server's directories ------------------------------------------------

_FAKE_REDIS = """\
import os, socket
path = {path!r}
os.makedirs(os.path.dirname(path), exist_ok=True)
os.chmod(os.path.dirname(path), 0o777)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    data = c.recv(65536)
    with open(os.path.join(os.path.dirname(path), "heard"), "ab") as f:
        f.write(data)
    c.sendall(b"+PONG\\r\\n")
    c.close()
"""


def test_a_data_dir_of_another_user_or_open_to_all_is_refused_in_one_line(tmp_path: Path) -> None:
    """redis.data_dir made by nobody, or 0777: start refuses with one line and writes nothing there."""
    from smqsup.errors import RedisServerError
    from smqsup.launch.process import RedisServer

    theirs = os.path.join(tempfile.gettempdir(), f"theirs-{os.urandom(4).hex()}")
    as_other(f"import os; os.mkdir({theirs!r}, 0o755)")
    mine = tmp_path / "open"
    mine.mkdir()
    mine.chmod(0o777)
    try:
        for d, why in ((Path(theirs), "owned by uid 65534"), (mine, "writable by others")):
            with pytest.raises(RedisServerError) as caught:
                RedisServer(d).start()
            assert "\n" not in str(caught.value) and why in str(caught.value), caught.value
            assert os.listdir(d) == []
    finally:
        subprocess.run(["rm", "-rf", theirs], check=True)


def test_a_socket_planted_by_another_user_where_the_short_socket_goes_is_never_used(tmp_path: Path) -> None:
    """nobody serves a fake Redis at /tmp/smqsup-<hash>/redis.sock of a deep data dir: no command talks to it."""
    from smqsup.config.model import loads
    from smqsup.errors import RedisServerError
    from smqsup.launch.discovery import running_url, socket_path
    from smqsup.launch.embedded import NoEmbeddedServer, redis_url
    from smqsup.launch.process import RedisServer

    deep = tmp_path / ("d" * 100)
    deep.mkdir(mode=0o700)
    path = socket_path(deep)
    assert str(path).startswith("/tmp/smqsup-")
    fake = subprocess.Popen(["/usr/bin/python3", "-c", _FAKE_REDIS.format(path=str(path))], user=OTHER,
                            group="nogroup", cwd="/", stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert fake.stdout is not None and fake.stdout.readline() == b"listening\n"
        assert running_url(deep) is None
        cfg = loads(f"redis: {{data_dir: {str(deep)!r}}}\nqueues: {{q: {{handler: 'm:f'}}}}\n",
                    str(tmp_path / "q.yaml"))
        with pytest.raises(NoEmbeddedServer):
            redis_url(cfg)
        with pytest.raises(RedisServerError) as caught:
            RedisServer(deep).start()
        assert "\n" not in str(caught.value) and "not private" in str(caught.value)
        assert not (path.parent / "heard").exists()
    finally:
        fake.kill()
        fake.wait()
        subprocess.run(["rm", "-rf", str(path.parent)], check=True)


def test_the_short_socket_dir_goes_when_its_server_stops(tmp_path: Path) -> None:
    """A deep data dir's server: its /tmp/smqsup-<hash> directory (0700, ours) is removed at stop."""
    from smqsup.launch.discovery import socket_path
    from smqsup.launch.process import RedisServer

    deep = tmp_path / ("e" * 100)
    server = RedisServer(deep)
    server.start()
    try:
        info = os.stat(socket_path(deep).parent)
        assert info.st_uid == os.getuid() and info.st_mode & 0o777 == 0o700
    finally:
        server.stop()
    assert not socket_path(deep).parent.exists()
