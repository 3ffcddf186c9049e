"""Where the handlers' code comes from, parent side: the working directory
as its user named it, re-resolved at each roll.

    start ─▶ CodeDir(): logical = $PWD, or else the directory of the config
             file as named on the command line, when it is our working
             directory (a symlink such as /srv/app/current; systemd's
             WorkingDirectory= sets no $PWD), physical = where it points
    SIGHUP, smqsup roll ─▶ follow(): the link points elsewhere now (a
             symlink-switch deploy) ─▶ chdir there and put the new directory
             in sys.path where the old one was ─▶ the roll's new consumers
             (forked after) import the new release

Between two rolls the directory stays pinned: a consumer restarted after a
crash runs the code of its generation, not a release switched in since.
"""

from __future__ import annotations

import os
import sys
from typing import Optional


def _logical(physical: str, config: "os.PathLike[str] | str | None") -> str:
    """The first of $PWD (the shell went through a symlink) and the directory
    of ``config`` as named (``-c /srv/app/current/queues.yaml``: systemd sets
    no $PWD) that names the directory ``physical`` (an absolute path, the
    same inode); else ``physical``."""
    named = [os.environ.get("PWD", "")]
    if config is not None and os.path.isabs(config):
        named.append(os.path.dirname(os.fspath(config)))
    for path in named:
        if path and os.path.isabs(path) and os.path.normpath(path) != physical and _same(path, physical):
            return os.path.normpath(path)
    return physical


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except OSError:
        return False


class CodeDir:
    """The code directory: ``logical`` (as named) and ``physical`` (where
    the running generation's code is). Not thread-safe."""

    def __init__(self, config: "os.PathLike[str] | str | None" = None) -> None:
        self.physical = os.getcwd()
        self.logical = _logical(self.physical, config)

    def moved(self) -> Optional[str]:
        """Where the logical path points now, if elsewhere than ``physical``."""
        if self.logical == self.physical:
            return None
        now = os.path.realpath(self.logical)
        return now if now != self.physical and os.path.isdir(now) else None

    def follow(self) -> Optional[str]:
        """Re-resolve: move to where the logical path points now; the new
        directory if it moved (None: it did not, or it cannot be entered)."""
        new = self.moved()
        if new is None:
            return None
        try:
            os.chdir(new)
        except OSError:
            return None
        sys.path[:] = [new if entry == self.physical else entry for entry in sys.path]
        self.physical = new
        return new

    def named(self, path: "os.PathLike[str] | str") -> str:
        """``path`` (the config file) as named from the logical directory:
        the supervisor's title, which smqsup roll -c resolves."""
        return os.path.join(self.logical, path)

    def describe(self) -> str:
        """For a log line: ``/srv/app/current -> /srv/app/releases/r2``, or the one directory."""
        return self.physical if self.logical == self.physical else f"{self.logical} -> {self.physical}"
