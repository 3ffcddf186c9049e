"""The children's reports to their supervisor, parent side: a private
directory held open for the supervisor's life.

    Reports() ─▶ sweep the dirs of dead supervisors ─▶ mkdtemp (0700) ─▶ open + flock
    fork ─▶ the child inherits the descriptor ─▶ child.py writes <pid>.json through it
    ready or reaped ─▶ take(pid): read through the descriptor, then unlink
    exit (clean or not) ─▶ close(): emptied and removed; SIGKILL: the next start's sweep

Invariant: after ``mkdtemp`` nothing goes through the directory's path but
its removal, checked to be the same directory: a path another local user
makes again (a /tmp cleaner removed ours) is never written, read or
trusted. A removed directory is replaced by a new one with a new random
name (``ensure``); children started before write into the removed one and
fail, which only costs the parent its view of their handler's files.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import stat
import tempfile
from typing import Any, Optional

from smqsup import defaults

log = logging.getLogger(__name__)

#: The report directories' names: smqsup-<supervisor pid>-<random>.
PREFIX = "smqsup-"
_NAME = re.compile(r"smqsup-\d+-[A-Za-z0-9_]{6,}\Z")
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Reports:
    """The private directory (mode 0700, ours, random name) where each child
    leaves one report for the parent, ``<pid>.json``: ``{"files": ...}``
    (worker/sources.py) before it says ready, or ``{"error": "one line"}``
    before it exits because its handler cannot be imported. ``fd`` is the
    descriptor children write through (ChildSpec.reports_fd)."""

    def __init__(self, root: Optional[str] = None) -> None:
        self.root = root or tempfile.gettempdir()
        sweep(self.root)
        self.dir, self.fd = _make(self.root)

    def take(self, pid: int) -> Optional[dict[str, Any]]:
        """The report of child ``pid`` (read once: the file goes), None if
        it wrote none or anything but a JSON object within the size bound."""
        name = f"{pid}.json"
        try:
            # Never blocks (a FIFO), never follows a link; a regular file only.
            fd: Optional[int] = os.open(name, _READ, dir_fd=self.fd)
        except OSError:
            fd = None
        try:
            regular = fd is not None and stat.S_ISREG(os.fstat(fd).st_mode)
            data = os.read(fd, defaults.CHILD_REPORT_MAX_BYTES + 1) if fd is not None and regular else b""
        except OSError:
            data = b""
        finally:
            if fd is not None:
                os.close(fd)
        _unlink(name, self.fd)  # read once: whatever it was, it goes
        if not data or len(data) > defaults.CHILD_REPORT_MAX_BYTES:
            return None
        try:
            report = json.loads(data)
        except (ValueError, RecursionError):
            return None
        return report if isinstance(report, dict) else None

    def ensure(self) -> None:
        """A new directory (new random name) if something removed ours (a
        /tmp cleaner); never the old path again, whoever made it since."""
        try:
            gone = os.fstat(self.fd).st_nlink == 0
        except OSError:
            gone = True
        if gone:
            old = self.dir
            os.close(self.fd)
            self.dir, self.fd = _make(self.root)
            log.warning("the consumers' report directory %s was removed; using %s", old, self.dir)

    def close(self) -> None:
        """Empty and remove the directory; idempotent."""
        if self.fd < 0:
            return
        _empty(self.fd)
        try:
            if os.path.samestat(os.lstat(self.dir), os.fstat(self.fd)):
                os.rmdir(self.dir)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1


def _make(root: str) -> tuple[str, int]:
    """A new private directory under ``root``, open and locked for our life."""
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)  # 0700, ours, O_EXCL-made
    fd = os.open(path, _DIR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new: nobody else holds it
    return path, fd


def sweep(root: str) -> int:
    """Remove the report directories under ``root`` that are ours (owner
    uid) and whose supervisor is gone (nobody holds their flock: killed
    with SIGKILL); how many. Others' and live ones are left alone. (One
    made this instant, not locked yet, may go too: its supervisor's next
    ``ensure`` sees it removed and makes another.)"""
    removed = 0
    try:
        names = [n for n in os.listdir(root) if _NAME.match(n)]
    except OSError:
        return 0
    for name in names:
        path = os.path.join(root, name)
        try:
            fd = os.open(path, _DIR)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if info.st_uid != os.geteuid() or not stat.S_ISDIR(info.st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _empty(fd)
            if os.path.samestat(os.lstat(path), info):
                os.rmdir(path)
                removed += 1
        except OSError:  # held by a live supervisor, or changed meanwhile
            continue
        finally:
            os.close(fd)
    return removed


def _empty(fd: int) -> None:
    """Unlink every entry of directory ``fd`` (reports are files, never dirs)."""
    try:
        names = os.listdir(fd)
    except OSError:
        return
    for name in names:
        _unlink(name, fd)


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass
