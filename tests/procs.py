"""Running the real ``smqsup`` command in subprocesses for tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

from tests.helpers import wait_for

if TYPE_CHECKING:
    import psutil

REPO = Path(__file__).resolve().parent.parent


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


class Supervisor:
    """``smqsup -c FILE`` in a subprocess, its log in a file, optionally with a
    NOTIFY_SOCKET the test reads.

    ``extra_env`` is added to its environment; ``journal`` sets JOURNAL_STREAM
    to the device:inode of the log file, as systemd does when stderr is the journal.
    """

    def __init__(self, cfg: Path, out_dir: Path, notify_socket: Optional[Path] = None,
                 extra_env: Optional[dict[str, str]] = None, journal: bool = False) -> None:
        self.cfg = cfg
        self.log_path = out_dir / "supervisor.txt"
        extra = {"NOTIFY_SOCKET": str(notify_socket)} if notify_socket else {}
        extra.update(extra_env or {})
        self._log = open(self.log_path, "w")
        if journal:
            st = os.fstat(self._log.fileno())
            extra["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        self.proc = subprocess.Popen([sys.executable, "-m", "smqsup", "-c", str(cfg)], env=env(out_dir, **extra),
                                     stdout=self._log, stderr=subprocess.STDOUT, text=True)
        self.seen_children: set[int] = set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def children(self) -> list["psutil.Process"]:
        """Live consumer processes (direct children titled 'smqsup: consumer')."""
        import psutil

        found = []
        try:
            kids = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        for k in kids:
            try:
                if k.status() != psutil.STATUS_ZOMBIE and "smqsup: consumer" in " ".join(k.cmdline()):
                    found.append(k)
                    self.seen_children.add(k.pid)
            except psutil.NoSuchProcess:
                pass
        return found

    def titles(self) -> list[str]:
        return sorted(" ".join(k.cmdline()) for k in self.children())

    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL) and any consumer it left behind."""
        import psutil

        stop(self.proc, timeout=30)
        for pid in self.seen_children:
            try:
                p = psutil.Process(pid)
                if "smqsup: consumer" in " ".join(p.cmdline()):
                    p.kill()
            except psutil.NoSuchProcess:
                pass
        self._log.close()
