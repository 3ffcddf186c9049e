"""What the supervisor reads of its children's resources with psutil: CPU%,
RSS and USS samples, and whether a process is stopped (SIGSTOP, a debugger)."""

from __future__ import annotations

import logging
import time

import psutil

from smqsup import defaults
from smqsup.supervisor.states import Child

log = logging.getLogger(__name__)


class Sampler:
    """Cached psutil handles, one per child pid (cpu_percent needs the previous sample)."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}

    def _process(self, pid: int) -> psutil.Process:
        proc = self._procs.get(pid)
        if proc is None or not proc.is_running():
            proc = self._procs[pid] = psutil.Process(pid)
        return proc

    def forget(self, pid: int) -> None:
        """The child was reaped: drop its handle."""
        self._procs.pop(pid, None)

    def sample(self, c: Child) -> None:
        """CPU% and RSS (cheap: /proc/PID/stat and statm) into ``c``; USS every
        USS_SAMPLE_S (it reads smaps_rollup, ten times dearer). A process gone
        meanwhile keeps its last figures."""
        try:
            proc = self._process(c.pid)
            c.cpu_percent = proc.cpu_percent(None)
            c.rss_bytes = proc.memory_info().rss
            now = time.monotonic()
            if now >= c.next_uss:
                c.next_uss = now + defaults.USS_SAMPLE_S
                try:
                    c.uss_bytes = proc.memory_full_info().uss
                except psutil.AccessDenied:
                    c.uss_bytes = None
        except psutil.Error:
            return
        log.debug("queue %s: consumer #%d pid %d cpu %.1f%% rss %d kB uss %s kB", c.queue, c.index, c.pid,
                  c.cpu_percent, c.rss_bytes >> 10, None if c.uss_bytes is None else c.uss_bytes >> 10)

    def is_stopped(self, pid: int) -> bool:
        """True if the process is stopped (SIGSTOP, a debugger): not working, so
        its heartbeat must lapse. A busy process, even one stuck in C code, runs."""
        try:
            return self._process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
        except psutil.Error:
            return False
