"""The web UI child: one process the supervisor runs while queues.yaml has a
``web:`` section, restarted under the same RestartPolicy as a queue's
consumers (never FATAL by count; FATAL until SIGHUP on bad web settings)."""

from __future__ import annotations

import logging
import signal
import time
from typing import Optional

from smqsup import defaults
from smqsup.config.model import Config
from smqsup.supervisor import child as child_mod
from smqsup.supervisor.decide import Death, web_death
from smqsup.supervisor.protocol import signal_child
from smqsup.supervisor.states import Child, RestartPolicy, State, StopReason, describe_status

log = logging.getLogger(__name__)


class WebChild:
    """Parent side of the web UI process. Not thread-safe."""

    def __init__(self, url: str, parent_pid: int) -> None:
        self.url = url
        self.parent_pid = parent_pid
        self.proc: Optional[Child] = None
        self.policy = RestartPolicy(limit=None)

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def ensure(self, cfg: Config, now: float) -> None:
        """Start the web UI if the config has one and the policy allows it now."""
        if cfg.web is None or self.proc is not None or not self.policy.may_start(now):
            return
        pid = child_mod.fork_holding_term()
        if pid == 0:
            child_mod.run_web(cfg, self.url, self.parent_pid)
        self.proc = Child(pid, "", 0, "", "", -1, now, state=State.RUNNING)
        log.info("web UI started (pid %d) on %s", pid, cfg.web.listen)

    def exited(self, status: int, *, stopping: bool) -> None:
        """It was reaped: decide its restart (none while the supervisor stops)."""
        proc, self.proc = self.proc, None
        if stopping or proc is None:
            return
        now = time.monotonic()
        uptime = now - proc.started_at
        if uptime >= defaults.RESTART_BACKOFF_RESET_S:
            self.policy.stable()
        cause = describe_status(status)
        verdict = web_death(status, uptime)
        if verdict is Death.CANNOT_RUN:
            self.policy.give_up("bad web: settings")
            log.error("web UI %s (bad web: settings); not restarted until SIGHUP", cause)
            return
        if verdict is Death.AT_START:
            self.policy.died_at_start(now)
        else:
            self.policy.died_working(now)
        log.error("web UI (pid %d) %s; restarting it", proc.pid, cause)

    def stop(self) -> None:
        """SIGTERM it; SIGKILL if it lingers past WEB_STOP_TIMEOUT_S (``enforce``)."""
        if self.proc is not None and not self.proc.stopping:
            signal_child(self.proc.pid, signal.SIGTERM)
            self.proc.stopping_for(StopReason.SHUTDOWN, time.monotonic() + defaults.WEB_STOP_TIMEOUT_S)

    def kill(self) -> None:
        if self.proc is not None:
            signal_child(self.proc.pid, signal.SIGKILL)

    def enforce(self, now: float) -> None:
        """SIGKILL it once its stop is overdue."""
        stop = self.proc.stop if self.proc else None
        if self.proc is not None and stop is not None and stop.kill_at is not None and now >= stop.kill_at:
            stop.kill_at = None
            signal_child(self.proc.pid, signal.SIGKILL)

    def reload(self) -> None:
        """SIGHUP changed the web section: stop it and start afresh (with the new settings, if any)."""
        self.stop()
        self.policy.reset()

