"""Running the real ``smqsup`` command in subprocesses for tests."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

from tests.support.handlers import read_events
from tests.support.helpers import wait_for

if TYPE_CHECKING:
    import psutil
    import redis

REPO = Path(__file__).resolve().parents[2]
#: A consumer's process title: ``smqsup: consumer QUEUE #N ...``.
_CONSUMER_TITLE = re.compile(r"smqsup: consumer (\S+) #\d+")


def write_config(path: Path, url: Optional[str], queues: dict[str, dict[str, Any]], **top: Any) -> Path:
    """Write a queues.yaml; ``url`` None means the embedded server."""
    doc: dict[str, Any] = dict(top)
    if url is not None:
        doc.setdefault("redis", {})["url"] = url
    doc["queues"] = queues
    path.write_text(yaml.safe_dump(doc))
    return path


def env(out_dir: Optional[Path] = None, **extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), e.get("PYTHONPATH", "")]))
    if out_dir is not None:
        e["SMQ_TEST_OUT"] = str(out_dir)
    e.update(extra)
    return e


def smqsup(*args: str, out_dir: Optional[Path] = None, **popen: Any) -> "subprocess.Popen[str]":
    """Start ``smqsup ARGS`` (as ``python -m smqsup``) with stderr captured to a pipe."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "smqsup", *args], env=popen.pop("env", env(out_dir)),
                            text=True, **popen)


def run(*args: str, timeout: float = 60, **kw: Any) -> "subprocess.CompletedProcess[str]":
    """Run ``smqsup ARGS`` to completion."""
    return subprocess.run([sys.executable, "-m", "smqsup", *args], env=kw.pop("env", env()),
                          capture_output=True, text=True, timeout=timeout, **kw)


def stop(proc: "subprocess.Popen[str]", timeout: float = 15) -> int:
    """SIGTERM a process we started and wait for it; SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


class NotifySocket:
    """A datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="smqn")
        self.path = Path(self.dir) / "notify"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.setblocking(False)
        self.received: list[str] = []

    def poll(self) -> list[str]:
        while True:
            try:
                self.received.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return self.received

    def wait(self, field: str, after: int = 0, timeout_s: float = 15) -> int:
        """Index of the first datagram from ``after`` on that holds ``field`` (e.g. 'READY=1')."""
        def find() -> int:
            for i, d in enumerate(self.poll()[after:], after):
                if field in d.split("\n"):
                    return i + 1
            return 0
        return wait_for(find, timeout_s, message=f"no {field} in {self.received[after:]}") - 1

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def children_of(pid: int) -> list["psutil.Process"]:
    """The children of process ``pid``, as psutil's ``children()`` gives them,
    read from /proc/PID/task/*/children where the kernel has those (tests poll
    this: psutil reads the stat file of every process on the machine, 4 ms
    with 130 of them, a thousandth of that here); psutil.NoSuchProcess if
    ``pid`` is gone."""
    import psutil

    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        listed = []
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                listed += f.read().split()
    except FileNotFoundError:  # (the process is gone, or its task went while being read)
        if not psutil.pid_exists(pid):
            raise psutil.NoSuchProcess(pid) from None
        return psutil.Process(pid).children()
    except OSError:  # (a kernel without the children files)
        return psutil.Process(pid).children()
    kids = []
    for child in dict.fromkeys(int(p) for p in listed):
        try:
            kids.append(psutil.Process(child))
        except psutil.NoSuchProcess:
            pass
    return kids


class Supervisor:
    """``smqsup -c FILE`` in a subprocess, in a process group of its own (so
    that ``kill_group`` takes it and its children down as one, as a machine
    crash would), its log in ``out_dir/supervisor.txt``, optionally with a
    NOTIFY_SOCKET the test reads.

    ``out_dir`` is also its $SMQ_TEST_OUT, where its handlers record events:
    several supervisors on one Redis keep theirs apart by having one each.
    ``extra_env`` is added to its environment; ``journal`` sets JOURNAL_STREAM
    to the device:inode of the log file, as systemd does when stderr is the journal.
    """

    def __init__(self, cfg: Path, out_dir: Path, notify_socket: Optional[Path] = None,
                 extra_env: Optional[dict[str, str]] = None, journal: bool = False,
                 name: str = "supervisor", cwd: Optional[Path] = None) -> None:
        self.name = name
        self.cfg = cfg
        self.out_dir = out_dir
        self.log_path = out_dir / "supervisor.txt"
        extra = {"NOTIFY_SOCKET": str(notify_socket)} if notify_socket else {}
        extra.update(extra_env or {})
        self._log = open(self.log_path, "w")
        if journal:
            st = os.fstat(self._log.fileno())
            extra["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        self.proc = subprocess.Popen([sys.executable, "-m", "smqsup", "-c", str(cfg)], env=env(out_dir, **extra), cwd=cwd,
                                     stdout=self._log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        #: Every consumer ``children()`` has listed, by pid: ``stop()`` kills those left behind.
        self._seen: dict[int, psutil.Process] = {}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _live(self) -> list["psutil.Process"]:
        """Its children that are not zombies, titled yet or not."""
        import psutil

        try:
            kids = children_of(self.pid)
        except psutil.NoSuchProcess:
            return []
        alive = []
        for k in kids:
            try:
                if k.status() != psutil.STATUS_ZOMBIE:
                    alive.append(k)
            except psutil.NoSuchProcess:
                pass
        return alive

    def children(self) -> list["psutil.Process"]:
        """Live consumer processes (direct children titled 'smqsup: consumer')."""
        import psutil

        found = []
        for k in self._live():
            try:
                if "smqsup: consumer" in " ".join(k.cmdline()):
                    found.append(k)
                    self._seen[k.pid] = k
            except psutil.NoSuchProcess:
                pass
        return found

    def only_child(self) -> int | None:
        """The pid of the one live consumer, or None while there are none or several (one snapshot, no race)."""
        found = self.children()
        return found[0].pid if len(found) == 1 else None

    def processes(self) -> set[int]:
        """Pids of every live child (consumers, web UI, redis-server), titled yet or not."""
        return {k.pid for k in self._live()}

    def consumers_by_queue(self) -> dict[str, set[int]]:
        """Queue -> pids of its live consumer processes, read from their titles."""
        import psutil

        found: dict[str, set[int]] = {}
        for k in self.children():
            try:
                m = _CONSUMER_TITLE.search(" ".join(k.cmdline()))
            except psutil.NoSuchProcess:
                continue
            if m:
                found.setdefault(m.group(1), set()).add(k.pid)
        return found

    def titles(self) -> list[str]:
        return sorted(" ".join(k.cmdline()) for k in self.children())

    def events(self, event: Optional[str] = None) -> list[dict[str, Any]]:
        """What its handlers recorded (tests.support.handlers), only ``event`` ones if given."""
        return [e for e in read_events(str(self.out_dir)) if event is None or e["event"] == event]

    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL the supervisor and every process in its group at once."""
        os.killpg(self.pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop it (SIGCONT in case it is paused, SIGTERM, SIGKILL after 30 s),
        then kill every child it left behind, paused or not."""
        stop_all([self])

    def discard(self) -> None:
        """End it at a fixture's teardown, where the test is over and nothing
        reads how it ends: SIGKILL its process group at once (the supervisor,
        its consumers and web child), then every child it left outside it
        (an embedded redis-server has a session of its own). ``stop()`` is
        the graceful way, for a test about stopping: it waits up to a blocking
        fetch (1 s by default) for each consumer to see the SIGTERM."""
        import psutil

        left = {k.pid: k for k in self._live()} | self._seen
        if self.proc.poll() is None:  # not reaped: its pid is still its group's id
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        for k in left.values():
            try:
                k.kill()  # psutil checks first that the pid is still that process
            except psutil.NoSuchProcess:
                pass
        self._log.close()


def stop_all(supervisors: "list[Supervisor]") -> None:
    """``Supervisor.stop()`` of several at once: each is sent SIGCONT and SIGTERM
    before any is waited for (each graceful stop waits out its consumers'
    blocking fetches: side by side, not one after the other); SIGKILL for one
    still running 30 s later; then every child each left behind is killed."""
    import psutil

    left = [{k.pid: k for k in s._live()} | s._seen for s in supervisors]
    asked = []
    for s in supervisors:
        if s.proc.poll() is None:
            s.signal(signal.SIGCONT)  # a stopped process keeps SIGTERM pending
            s.proc.send_signal(signal.SIGTERM)
            asked.append(s)
    deadline = time.monotonic() + 30
    for s in asked:
        try:
            s.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            s.proc.kill()
            s.proc.wait()
    for s, kids in zip(supervisors, left):
        for k in kids.values():
            try:
                k.send_signal(signal.SIGCONT)
                k.kill()  # psutil checks first that the pid is still that process
            except psutil.NoSuchProcess:
                pass
        s._log.close()


def wait_registered(s: Supervisor, n: int, client: "redis.Redis", queue: str = "q", namespace: str = "smq") -> None:
    """Wait until ``s`` has ``n`` consumers of ``queue`` registered in Redis
    (the registry's ids carry the consumer's pid)."""
    from smqsup.keys import QueueKeys

    def mine() -> int:
        pids = {k.pid for k in s.children()}
        return sum(1 for cid in client.hkeys(QueueKeys(namespace, queue).consumers)
                   if int(cid.decode().split(":")[1]) in pids)
    wait_for(lambda: mine() == n, timeout_s=15, message=f"{s.name}: {mine()} of {n} consumers registered")


def gone(pid: int) -> bool:
    """True when process ``pid`` has exited (reaped or a zombie)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
