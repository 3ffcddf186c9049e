"""The supervisor's parent loop: forks one process per consumer and keeps
the running set equal to what queues.yaml asks for.

    signals ─▶ handler records signum ─▶ wakeup pipe ─▶ main loop
    main loop, every wake (signal) or tick (ARBITER_TICK_S):
        dispatch   recorded signals: handle_term, handle_int, handle_hup, ...
        reap       waitpid(-1, WNOHANG) ─▶ consumers.exited / web.exited
        limits     message_timeout, max_memory, samples   (consumers.py, resources.py)
        reconcile  start / stop / roll toward each target   (decide.py, consumers.py)
        web        keep the web UI child running            (web_child.py)
        deadlines  SIGKILL what did not stop in time
        reclaims   retry the ones Redis refused             (reclaims.py)
        heartbeat  renew ready children, one round trip     (beats.py)
        schedules  declare this config's schedules          (declarations.py)
        collector  this supervisor's part in the GC election (gc.py)
        notify     READY=1 once converged, STATUS=, WATCHDOG=1 (systemd.py)

Signal handlers only record: no logging, waitpid or kill inside them (a
handler can interrupt the logging module while it holds its lock). Until the
last fork the parent runs no threads. Process liveness (waitpid) lives here;
consumer liveness (Redis heartbeats) is beats.py's and the collector's.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Optional

import psutil

from smqsup import defaults, safe
from smqsup.collector.collector import Collector
from smqsup.config import model as config_mod
from smqsup.config.model import Config
from smqsup.errors import BrokerConnectionError, BrokerError, SmqsupError
from smqsup.launch.embedded import ensure_server
from smqsup.launch.process import RedisServer
from smqsup.logs import Lasting
from smqsup.safe import mask_url
from smqsup.store.broker import Broker
from smqsup.supervisor import decide
from smqsup.supervisor.beats import Heartbeats
from smqsup.supervisor.consumers import Consumers
from smqsup.supervisor.declarations import Declarations
from smqsup.supervisor.plan import ReloadPlan, effective, plan
from smqsup.supervisor.queue_info import QueueInfo
from smqsup.supervisor.reclaims import Kind, Reclaim, Reclaims
from smqsup.supervisor.scaling import Autoscaler
from smqsup.supervisor.states import StopReason, describe_status
from smqsup.supervisor.systemd import Notifier
from smqsup.supervisor.web_child import WebChild
from smqsup.worker.handlers import import_handler
from smqsup.worker.sources import loaded_since

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGTTIN, signal.SIGTTOU,
            signal.SIGQUIT, signal.SIGUSR1)


def run_supervisor(cfg: Config) -> int:
    """Run the supervisor for ``cfg`` until a stop signal; exit status."""
    url, server = ensure_server(cfg, shared=False)
    arbiter: Optional[Arbiter] = None
    try:
        arbiter = Arbiter(cfg, url, server)
        return arbiter.run()
    finally:
        if arbiter is not None:  # every exit: a crash too (SIGKILL: the next start's sweep)
            arbiter.pool.reports.close()
        if server is not None:
            server.stop()


class Arbiter:
    """The parent process. Not thread-safe; one per process."""

    def __init__(self, cfg: Config, url: str, server: Optional[RedisServer]) -> None:
        self.cfg = cfg
        self.url = url
        self.server = server
        self.pid = os.getpid()
        # A short socket timeout: Redis trouble must not stall reaping for long.
        self.broker = Broker(url, cfg.namespace, client_name="smqsup-supervisor",
                             socket_timeout_s=defaults.SUPERVISOR_SOCKET_TIMEOUT_S,
                             wait_replicas=cfg.redis.wait_replicas, wait_timeout_s=cfg.redis.wait_timeout_s)
        # Redis trouble that lasts (heartbeats refused, reclaims postponed, no
        # child slot or fork): a line when it starts or changes, one when it ends.
        self._trouble = Lasting(log)
        self.reclaims = Reclaims(self.broker, self._trouble)
        self.pool = Consumers(cfg, url, self.broker, self.reclaims, self._trouble)
        self.collector = Collector(self.broker, cfg, owner=f"{self.pool.host}:{self.pid}")
        self.heartbeats = Heartbeats(self.pool, self.collector, self._trouble)
        self.scaler = Autoscaler(self.pool, self._trouble)
        self.queue_info = QueueInfo(self.pool, self.scaler)
        self.declarations = Declarations(self.broker, cfg, self.pool.host, self.pid, self._trouble)
        self.web = WebChild(url, self.pid)
        self.notifier = Notifier()
        self._signals: list[int] = []
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._stop_deadline = 0.0
        self._ready_sent = False
        self._next_watchdog = 0.0
        self._int_count = 0

    def run(self) -> int:
        self._install_signals()
        safe.set_title(f"smqsup: supervisor -c {self.pool.code.named(self.cfg.path)}")
        self._check_redis()
        self._preload()
        log.info("supervisor %d started: %s (%d consumer(s)), Redis %s", self.pid, self.cfg.path,
                 sum(q.target for q in self.pool.queues.values()), mask_url(self.url))
        while not self._done():
            self.pool.update_ready()
            if not self._stopping:
                self.pool.check_limits()
                self.scaler.tick()
                self.pool.reconcile()
                self.web.ensure(self.cfg, time.monotonic())
            self.pool.enforce_deadlines()
            self.web.enforce(time.monotonic())
            self.reclaims.retry()
            self.heartbeats.tick(self.cfg.heartbeat_interval_s)
            if not self._stopping:
                self.queue_info.tick(self.cfg.heartbeat_interval_s)
            self.declarations.tick()
            self.collector.tick()
            self._notify()
        self.declarations.withdraw_all()
        self.queue_info.withdraw()
        self.collector.release_all()
        self.reclaims.retry(now=True)  # a last try, whenever the previous one was
        log.info("supervisor %d stopped", self.pid)
        return 0

    def _done(self) -> bool:
        """Wait for a signal or a tick, act on signals and deaths; True once stopped."""
        self._wait()
        self._dispatch_signals()
        self.reap()
        if not self._stopping or self.pool.children or self.web.pid is not None:
            return False
        # A graceful stop's reclaims are free of cost: do not leave them to the
        # collector (which would charge an attempt) while Redis answers within
        # shutdown_timeout.
        return not self.reclaims.pending or time.monotonic() >= self._stop_deadline

    # --- setup -----------------------------------------------------------------------

    def _install_signals(self) -> None:
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in _SIGNALS:
            signal.signal(sig, self._record_signal)

    def _record_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        self._signals.append(signum)  # only record; the main loop acts

    def _check_redis(self) -> None:
        try:
            for warning in self.broker.check_server():
                log.warning("%s", warning)
        except BrokerConnectionError as exc:
            log.warning("Redis not usable at start (%s); consumers will wait for it", exc)
            return
        except BrokerError as exc:  # a check failed, Redis answers: the reclaim below is still due
            log.warning("%s", exc)
        try:
            self._reclaim_local_orphans()
        except BrokerError as exc:
            log.warning("Redis not usable at start (%s); consumers will wait for it", exc)

    def _reclaim_local_orphans(self) -> None:
        """Consumers registered from this host whose process is gone (a previous
        supervisor SIGKILLed with its children): return their messages now
        rather than wait for the garbage collector."""
        stale_after_ms = int(self.cfg.heartbeat_timeout_s * 1000)
        for name, q in self.pool.queues.items():
            for part in self.pool.partitions(name):
                for cid, info in self.broker.registry.consumers(part).items():
                    if info.host == self.pool.host and info.pid and not psutil.pid_exists(info.pid):
                        # Only if its heartbeat is stale too: another host may share
                        # this host name (containers) with its own pid namespace.
                        self.reclaims.run(Reclaim(Kind.ORPHAN, part, cid, "consumer lost (process gone at "
                                                  "supervisor start)", q.config.retry_threshold, stale_after_ms))

    def _preload(self) -> None:
        if not self.cfg.preload:
            return
        for name, q in self.pool.queues.items():
            before = set(sys.modules)
            try:
                self.pool.preloaded[name] = import_handler(
                    q.config.handler, path=str(self.cfg.path), key=f"queues.{name}.handler")
                self.pool.preloaded_sources[name] = loaded_since(before, q.config.handler.split(":", 1)[0])
            except SmqsupError as exc:
                q.policy.give_up("handler cannot be imported")
                log.error("%s", exc)

    # --- waiting and signals ---------------------------------------------------------

    def _wait(self) -> None:
        try:
            # Woken early when a due message is to be promoted (its lateness is
            # this loop's: DESIGN wants it within 100 ms of its due time).
            select.select([self._wake_r], [], [], self.collector.wake_in(defaults.ARBITER_TICK_S))
        except InterruptedError:
            pass
        try:
            while os.read(self._wake_r, 512):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _dispatch_signals(self) -> None:
        actions: dict[int, Callable[[], None]] = {
            signal.SIGTERM: self.handle_term, signal.SIGINT: self.handle_int, signal.SIGQUIT: self.handle_quit,
            signal.SIGHUP: self.handle_hup, signal.SIGCHLD: self.reap,
            signal.SIGTTIN: self.handle_ttin, signal.SIGTTOU: self.handle_ttou, signal.SIGUSR1: self.handle_usr1,
        }
        while self._signals:
            actions[self._signals.pop(0)]()

    def handle_term(self) -> None:
        if not self._stopping:
            log.info("SIGTERM: graceful stop (shutdown_timeout %.1fs)", self.cfg.shutdown_timeout_s)
            self._begin_shutdown()

    def handle_int(self) -> None:
        self._int_count += 1
        if self._int_count == 1 and not self._stopping:
            log.info("SIGINT: graceful stop (shutdown_timeout %.1fs); SIGINT again to stop at once",
                     self.cfg.shutdown_timeout_s)
            self._begin_shutdown()
        else:
            self.handle_quit()

    def handle_quit(self) -> None:
        log.warning("stopping at once: killing %d consumer(s); their messages go back to pending",
                    len(self.pool.children))
        self._begin_shutdown()
        self.pool.kill_all()
        self.web.kill()

    def handle_hup(self) -> None:
        # Everything that may fail runs before anything changes: a rejected
        # file leaves the running config and children exactly as they were
        # (but the code directory: a deploy switched it whatever the file).
        moved = self.pool.code.follow()
        try:
            new = config_mod.load(self.cfg.path)
            p = plan(self.cfg, new)
            cfg = effective(self.cfg, new)
        except SmqsupError as exc:
            log.error("SIGHUP: new config rejected, keeping the old one: %s", safe.escape(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop every consumer
            log.error("SIGHUP: new config rejected, keeping the old one: unexpected %s",
                      safe.escape(f"{type(exc).__name__}: {exc}"))
            log.debug("SIGHUP: the rejected reload's traceback", exc_info=True)
            return
        finally:
            if moved is not None:
                self._roll_moved()
        self._apply(p, cfg)

    def _apply(self, p: ReloadPlan, cfg: Config) -> None:
        self.notifier.reloading()
        self.cfg = cfg
        self.collector.update(cfg)
        self.declarations.update(cfg)
        self.pool.apply(p, cfg)
        # One summary, after the queues' own lines: what the file changed, and which code rolls.
        code = self.pool.check_code()
        said = [] if p.empty and code else [p.describe()]
        if code:
            said.append(f"handler code rolling: {', '.join(code)}")
        log.info("SIGHUP: %s", "; ".join(said))
        for key in p.restart_required:
            log.warning("SIGHUP: %s changed; it takes effect only after a restart", key)
        if p.web_changed:
            self.web.reload()  # started again by the loop with the new settings, if any
        self._ready_sent = False

    def _roll_moved(self) -> None:
        """The code directory was switched (a symlink deploy): every queue
        rolls onto it, but those whose handler the parent preloaded."""
        why = f"the code directory {self.pool.code.logical} moved to {self.pool.code.physical}"
        for name in self.pool.preloaded:
            log.warning("queue %s: %s, but preload imported its handler in the supervisor: restart smqsup "
                        "to run the new code", name, why)
        self.pool.roll([name for name, _ in self.pool.live_queues() if name not in self.pool.preloaded], why)
        self._ready_sent = False

    def handle_usr1(self) -> None:
        """``smqsup roll``: roll the queues its requests in Redis name,
        whatever their code (none found: nothing rolls)."""
        if self._stopping:
            return
        try:
            asked = self.broker.control.take_rolls(self.pool.host, self.pid)
        except BrokerError as exc:
            log.warning("SIGUSR1: the roll requests cannot be read (%s); nothing rolled", exc)
            return
        if not asked:
            log.warning("SIGUSR1: no roll request found (use smqsup roll); nothing rolled")
            return
        names = [name for name, _ in self.pool.live_queues()]
        if all(a.queues is not None for a in asked):
            wanted = {name for a in asked for name in a.queues or ()}
            for name in sorted(wanted - set(names))[:10]:
                log.warning("SIGUSR1: no queue %s in %s; not rolled", safe.escape(name, 200), self.cfg.path)
            names = [name for name in names if name in wanted]
        self.pool.code.follow()  # a symlink switched since: its new target is what the roll runs
        log.info("SIGUSR1: rolling %s", ", ".join(names) or "nothing")
        self.pool.roll(names, "a roll was asked for (smqsup roll)")
        self._ready_sent = False

    def handle_ttin(self) -> None:
        """One more consumer in every queue, within an autoscaled queue's max."""
        self.scaler.step_all(+1, "SIGTTIN")

    def handle_ttou(self) -> None:
        """One fewer consumer in every queue, not below 1 nor an autoscaled queue's min."""
        self.scaler.step_all(-1, "SIGTTOU")

    # --- reaping and stopping ----------------------------------------------------------

    def reap(self) -> None:
        """Reap every dead child: a consumer, the web UI or the embedded redis-server."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            c = self.pool.children.get(pid)
            if c is not None:
                self.pool.exited(c, status)
            elif pid == self.web.pid:
                self.web.exited(status, stopping=self._stopping)
            elif self.server is not None and pid == self.server.pid:
                self._on_server_exit(status)

    def _on_server_exit(self, status: int) -> None:
        assert self.server is not None
        log.error("embedded redis-server %s; restarting it", describe_status(status))
        self.server.forget()
        try:
            self.server.start()
        except SmqsupError as exc:
            log.error("embedded redis-server did not restart: %s", exc)

    def _begin_shutdown(self) -> None:
        if not self._stopping:
            self._stopping = True
            self._stop_deadline = time.monotonic() + self.cfg.shutdown_timeout_s + 5.0
            self.notifier.stopping()
        self.web.stop()
        self.pool.stop_all(StopReason.SHUTDOWN)

    # --- systemd -------------------------------------------------------------------------

    def _notify(self) -> None:
        # The status line serves systemd's STATUS= and the one "all consumers
        # ready" line: with no systemd listening, it is not made every tick
        # once that line is said.
        if not self._stopping and (self.notifier.enabled or not self._ready_sent):
            line = decide.status_line(self.pool.queues, self.pool.children.values())
            self.notifier.status(line)
            if not self._ready_sent and decide.converged(self.pool.queues, self.pool.children.values()):
                self._ready_sent = True
                self.notifier.ready(line)
                log.info("all consumers ready: %s", line)
        interval = self.notifier.watchdog_interval_s
        if interval is not None and time.monotonic() >= self._next_watchdog:
            self._next_watchdog = time.monotonic() + interval
            self.notifier.watchdog()
