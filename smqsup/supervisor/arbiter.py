"""The supervisor's parent loop: forks one process per consumer and keeps
the running set equal to what queues.yaml asks for.

    signals ─▶ handler records signum ─▶ wakeup pipe ─▶ main loop
    main loop, every wake (signal) or tick:
        dispatch recorded signals (handle_term, handle_int, handle_hup, ...)
        reap       waitpid(-1, WNOHANG) loop ─▶ reclaim the dead child's list
        limits     message_timeout (SIGKILL), max_memory (graceful recycle)
        reconcile  per queue: start / stop / roll children toward the target
        heartbeat  renew every live child's heartbeat, all queues in one
                   pipelined call per heartbeat_interval (a child busy in C
                   code holding the GIL is still alive; a SIGSTOPped one is
                   not renewed, and one the collector declared dead is stopped)
        collector  this supervisor's part in each queue's GC election (gc.py)
        notify     READY=1 once converged, STATUS=, WATCHDOG=1

Signal handlers only record: no logging, waitpid or kill inside them (a
handler can interrupt the logging module while it holds its lock). Until the
last fork the parent runs no threads. Process liveness (waitpid) lives here;
consumer liveness (Redis heartbeats) is another matter, handled elsewhere.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Optional

import psutil

from smqsup import config as config_mod
from smqsup import defaults, safe
from smqsup.broker import Broker
from smqsup.config import Config
from smqsup.embedded import ensure_server
from smqsup.errors import BrokerError, SmqsupError
from smqsup.gc import Collector
from smqsup.info import ConsumerInfo
from smqsup.logs import Lasting
from smqsup.redis_server import RedisServer
from smqsup.safe import mask_url
from smqsup.supervisor import child as child_mod
from smqsup.supervisor.plan import effective, generation, plan
from smqsup.supervisor.protocol import EXIT_IMPORT, EXIT_OK, MAX_SLOTS, Slots, SlotView, monotonic_us
from smqsup.supervisor.state import Child, QueueState, StopReason, describe_status
from smqsup.supervisor.systemd import Notifier

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGTTIN, signal.SIGTTOU,
            signal.SIGQUIT)


def run_supervisor(cfg: Config) -> int:
    """Run the supervisor for ``cfg`` until a stop signal; exit status."""
    url, server = ensure_server(cfg, shared=False)
    try:
        return Arbiter(cfg, url, server).run()
    finally:
        if server is not None:
            server.stop()


class Arbiter:
    """The parent process. Not thread-safe; one per process."""

    def __init__(self, cfg: Config, url: str, server: Optional[RedisServer]) -> None:
        self.cfg = cfg
        self.url = url
        self.server = server
        self.pid = os.getpid()
        self.host = socket.gethostname()
        # A short socket timeout: Redis trouble must not stall reaping for long.
        self.broker = Broker(url, cfg.namespace, client_name="smqsup-supervisor",
                             socket_timeout_s=defaults.SUPERVISOR_SOCKET_TIMEOUT_S)
        self.collector = Collector(self.broker, cfg, owner=f"{self.host}:{self.pid}")
        self._next_heartbeat = 0.0
        # Redis trouble that lasts (heartbeats refused, reclaims postponed, no
        # child slot or fork): a line when it starts or changes, one when it ends.
        self._trouble = Lasting(log)
        self.notifier = Notifier()
        self.slots = Slots()
        self.children: dict[int, Child] = {}
        self.queues: dict[str, QueueState] = {}
        self.preloaded: dict[str, Callable[..., Any]] = {}
        self._signals: list[int] = []
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._ready_sent = False
        self._pending_reclaims: list[tuple[str, str, bool, str, int, int]] = []
        self._next_reclaim_retry = 0.0
        self._next_sample = 0.0
        self._next_watchdog = 0.0
        self._int_count = 0
        self._stop_deadline = 0.0
        # The web UI child (web: section): pid, when it may start again, backoff.
        self.web_pid: Optional[int] = None
        self._web_started = 0.0
        self._web_next_start = 0.0
        self._web_backoff = defaults.RESTART_BACKOFF_MIN_S
        self._web_kill_at: Optional[float] = None
        for name, q in cfg.queues.items():
            self.queues[name] = QueueState(q, generation(q, self.cfg), q.consumers)

    # --- setup ---------------------------------------------------------------

    def run(self) -> int:
        self._install_signals()
        _set_title(f"smqsup: supervisor -c {self.cfg.path}")
        self._check_redis()
        self._preload()
        log.info("supervisor %d started: %s (%d consumer(s)), Redis %s", self.pid,
                 self.cfg.path, sum(q.target for q in self.queues.values()), mask_url(self.url))
        while True:
            self._wait()
            self._dispatch_signals()
            self.reap()
            if self._stopping and not self.children and self.web_pid is None:
                # A graceful stop's reclaims are free of cost: do not leave them
                # to the collector (which would charge an attempt) while Redis
                # answers within shutdown_timeout.
                if not self._pending_reclaims or time.monotonic() >= self._stop_deadline:
                    break
            self._update_ready()
            if not self._stopping:
                self.check_limits()
                self.reconcile()
                self._ensure_web()
            self._enforce_deadlines()
            self._retry_reclaims()
            self.heartbeat()
            self.collector.tick()
            self._notify()
        self.collector.release_all()
        self._next_reclaim_retry = 0.0  # a last try, whenever the previous one was
        self._retry_reclaims()
        log.info("supervisor %d stopped", self.pid)
        return 0

    def _install_signals(self) -> None:
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in _SIGNALS:
            signal.signal(sig, self._record_signal)

    def _record_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        self._signals.append(signum)  # only record; the main loop acts

    def _check_redis(self) -> None:
        from smqsup.errors import BrokerConnectionError  # local: keeps this hunk apart from the imports

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

    def _preload(self) -> None:
        if not self.cfg.preload:
            return
        for name, q in self.queues.items():
            try:
                self.preloaded[name] = config_mod.import_handler(
                    q.config.handler, path=str(self.cfg.path), key=f"queues.{name}.handler")
            except SmqsupError as exc:
                q.fatal = "handler cannot be imported"
                log.error("%s", exc)

    def _reclaim_local_orphans(self) -> None:
        """Consumers registered from this host whose process is gone (a previous
        supervisor SIGKILLed with its children): return their messages now
        rather than wait for the garbage collector."""
        for name, q in self.queues.items():
            for cid, info in self.broker.consumers(name).items():
                if info.host == self.host and info.pid and not psutil.pid_exists(info.pid):
                    # Only if its heartbeat is stale too: another host may share
                    # this host name (containers) with its own pid namespace.
                    self._reclaim(name, cid, True, "consumer lost (process gone at supervisor start)",
                                  q.config.retry_threshold, stale_after_ms=int(self.cfg.heartbeat_timeout_s * 1000))

    # --- main loop pieces ------------------------------------------------------

    def _wait(self) -> None:
        timeout = defaults.ARBITER_TICK_S
        try:
            select.select([self._wake_r], [], [], timeout)
        except InterruptedError:
            pass
        try:
            while os.read(self._wake_r, 512):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _dispatch_signals(self) -> None:
        handlers: dict[int, Callable[[], None]] = {
            signal.SIGTERM: self.handle_term, signal.SIGINT: self.handle_int, signal.SIGQUIT: self.handle_quit,
            signal.SIGHUP: self.handle_hup, signal.SIGCHLD: self.reap,
            signal.SIGTTIN: self.handle_ttin, signal.SIGTTOU: self.handle_ttou,
        }
        while self._signals:
            handlers[self._signals.pop(0)]()

    # --- signal handlers (called from the main loop) ---------------------------

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
                    len(self.children))
        self._begin_shutdown()
        for c in self.children.values():
            c.kill_at = 0.0
        if self.web_pid is not None:
            _signal(self.web_pid, signal.SIGKILL)

    def handle_hup(self) -> None:
        # Everything that may fail runs before anything changes: a rejected
        # file leaves the running config and children exactly as they were.
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
        self.notifier.reloading()
        log.info("SIGHUP: %s", p.describe())
        for key in p.restart_required:
            log.warning("SIGHUP: %s changed; it takes effect only after a restart", key)
        self.cfg = cfg
        self.collector.update(self.cfg)
        for name, q in self.cfg.queues.items():
            state = self.queues.get(name)
            if state is None or state.removed:
                self.queues[name] = QueueState(q, generation(q, self.cfg), q.consumers)
                continue
            if name in p.rolled or q != state.config:
                state.fatal = None
                state.failures = 0
                state.backoff_s = defaults.RESTART_BACKOFF_MIN_S
            state.config, state.generation, state.target = q, generation(q, self.cfg), q.consumers
        for name in p.removed:
            self.queues[name].removed = True
            self.queues[name].target = 0
        if p.web_changed:
            self._stop_web()  # restarted by the loop with the new settings, if any
            self._web_next_start = 0.0
        self._ready_sent = False

    def handle_ttin(self) -> None:
        total = sum(q.target for q in self.queues.values() if not q.removed)
        for name, q in self.queues.items():
            if q.removed:
                continue
            if q.target >= config_mod.CONSUMERS_PER_QUEUE_MAX or total >= config_mod.CONSUMERS_TOTAL_MAX:
                log.warning("SIGTTIN: queue %s stays at %d consumers (at most %d per queue, %d in all queues)",
                            name, q.target, config_mod.CONSUMERS_PER_QUEUE_MAX, config_mod.CONSUMERS_TOTAL_MAX)
                continue
            q.target += 1
            total += 1
            log.info("SIGTTIN: queue %s scaled to %d", name, q.target)

    def handle_ttou(self) -> None:
        for name, q in self.queues.items():
            if not q.removed and q.target > 1:
                q.target -= 1
                log.info("SIGTTOU: queue %s scaled to %d", name, q.target)

    # --- reaping -----------------------------------------------------------------

    def reap(self) -> None:
        """Reap every dead child, reclaim its processing list, plan its restart."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            c = self.children.pop(pid, None)
            if c is not None:
                self._on_child_exit(c, status)
            elif pid == self.web_pid:
                self._on_web_exit(status)
            elif self.server is not None and pid == self.server.pid:
                self._on_server_exit(status)

    def _on_child_exit(self, c: Child, status: int) -> None:
        """Reclaim a dead child's list and decide about its replacement.

        Cost rule: a delivery that ends in an unplanned death of its consumer
        costs an attempt, whatever the death and whenever it came (before or
        after the child reported ready or busy), so that no message can be
        redelivered for ever. Only a stop the supervisor asked for (drain,
        scale-down, roll, recycle, shutdown, and our SIGKILL at its deadline)
        is free; a child that stops cleanly has emptied its own list already.
        """
        now = time.monotonic()
        view = self.slots.read(c.slot)
        self.slots.release(c.slot)
        _PROCS.pop(c.pid, None)
        q = self.queues.get(c.queue)
        threshold = q.config.retry_threshold if q else defaults.RETRY_THRESHOLD
        cause = describe_status(status)
        self._record_exit(c, cause)
        if c.stop_reason is StopReason.TIMEOUT:
            limit = q.config.message_timeout_s if q else 0
            self._reclaim(c.queue, c.consumer_id, True, f"timeout after {limit:g} s", threshold)
            log.error("queue %s: consumer #%d (pid %d) killed: message_timeout %gs passed",
                      c.queue, c.index, c.pid, limit)
        elif c.stop_reason is not None:
            # Our SIGKILL at the deadline is part of the stop we asked for; any
            # other death while stopping is not (a clean exit left nothing).
            costs = not c.killed_by_us
            self._reclaim(c.queue, c.consumer_id, costs, cause if costs else c.stop_reason.value, threshold)
            log.info("queue %s: consumer #%d (pid %d) stopped (%s): %s", c.queue, c.index, c.pid,
                     c.stop_reason.value, cause)
        else:
            # Status 0 before "ready" is no clean exit: handler code that ends
            # the process while it is imported must back off, not loop.
            clean = _clean_exit(status) and view.ready_us != 0
            held = self._reclaim(c.queue, c.consumer_id, True, cause, threshold)
            self._log_death(c, status, cause, clean)
            if q is not None and not clean:
                self._count_failure(q, c, status, view, held, now)
        if q is not None and q.removed and not any(ch.queue == c.queue for ch in self.children.values()):
            del self.queues[c.queue]

    def _record_exit(self, c: Child, cause: str) -> None:
        """Restarts and last exit cause of the consumer slot, for the statistics."""
        q = self.queues.get(c.queue)
        if q is None:
            return
        restarts = q.restarts.get(c.index, 0) + (0 if c.stop_reason is not None else 1)
        q.restarts[c.index] = restarts
        reason = cause if c.stop_reason is None else f"{c.stop_reason.value} ({cause})"
        info = {"host": self.host, "supervisor": self.pid, "index": c.index, "restarts": restarts,
                "last_exit": reason, "last_exit_at": round(time.time(), 3)}
        try:
            self.broker.record_slot(c.queue, f"{self.host}:#{c.index}", info)
        except BrokerError as exc:
            log.debug("slot statistics not written: %s", exc)

    def _log_death(self, c: Child, status: int, cause: str, clean: bool) -> None:
        if clean:
            log.info("queue %s: consumer #%d (pid %d) exited (max_messages reached or stopped); replacing it",
                     c.queue, c.index, c.pid)
        elif os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            log.error("queue %s: consumer #%d (pid %d) %s (out of memory? see dmesg); its message is back "
                      "in pending", c.queue, c.index, c.pid, cause)
        else:
            log.error("queue %s: consumer #%d (pid %d) %s", c.queue, c.index, c.pid, cause)

    def _count_failure(self, q: QueueState, c: Child, status: int, view: SlotView, held: Optional[int],
                       now: float) -> None:
        """A child that was working is replaced at once; one that died before
        or soon after its start without a message backs off.

        Working means it took a message: its slot counted one, it was busy, or
        its processing list held one when it died (read from the slot and the
        reclaim, never from our own "ready" bookkeeping, which may lag behind
        a child that took a message and died before the loop noticed it was
        ready). A poison message costs the queue an attempt, never a backoff.
        """
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_IMPORT:
            q.fatal = "handler cannot be imported"
            log.error("queue %s: FATAL: %s; other queues keep running (fix it and send SIGHUP)",
                      c.queue, q.fatal)
            return
        took_message = view.received > 0 or view.busy_since_us != 0 or bool(held)
        settled = view.ready_us != 0 and now - c.started_at >= defaults.MIN_UPTIME_S
        if took_message or settled:
            q.next_start_at = min(q.next_start_at, now)
            return
        q.failures += 1
        q.next_start_at = now + q.backoff_s
        log.warning("queue %s: consumer died at start (%d in a row); next start in %.1fs",
                    c.queue, q.failures, q.backoff_s)
        q.backoff_s = min(q.backoff_s * 2, defaults.RESTART_BACKOFF_MAX_S)
        if q.failures >= defaults.RESTART_LIMIT:
            q.fatal = f"consumers keep dying at start ({q.failures} in a row)"
            log.error("queue %s: FATAL: %s; other queues keep running (fix it and send SIGHUP)",
                      c.queue, q.fatal)

    # --- the web UI child ------------------------------------------------------------

    def _ensure_web(self) -> None:
        """Run the web UI child while the config has a web: section."""
        if self.cfg.web is None or self.web_pid is not None or time.monotonic() < self._web_next_start:
            return
        pid = os.fork()
        if pid == 0:
            child_mod.run_web(self.cfg, self.url, self.pid)
        self.web_pid = pid
        self._web_started = time.monotonic()
        log.info("web UI started (pid %d) on %s", pid, self.cfg.web.listen)

    def _on_web_exit(self, status: int) -> None:
        pid, self.web_pid, self._web_kill_at = self.web_pid, None, None
        if self._stopping:
            return
        cause = describe_status(status)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 2:
            log.error("web UI %s (bad web: settings); not restarted until SIGHUP", cause)
            self._web_next_start = float("inf")
            return
        uptime = time.monotonic() - self._web_started
        if uptime >= defaults.RESTART_BACKOFF_RESET_S:
            self._web_backoff = defaults.RESTART_BACKOFF_MIN_S
        self._web_next_start = time.monotonic() + (self._web_backoff if uptime < defaults.MIN_UPTIME_S else 0)
        if uptime < defaults.MIN_UPTIME_S:
            self._web_backoff = min(self._web_backoff * 2, defaults.RESTART_BACKOFF_MAX_S)
        log.error("web UI (pid %d) %s; restarting it", pid or 0, cause)

    def _stop_web(self) -> None:
        """SIGTERM the web UI; SIGKILL it if it lingers past WEB_STOP_TIMEOUT_S."""
        if self.web_pid is not None:
            _signal(self.web_pid, signal.SIGTERM)
            self._web_kill_at = time.monotonic() + defaults.WEB_STOP_TIMEOUT_S

    def _on_server_exit(self, status: int) -> None:
        assert self.server is not None
        log.error("embedded redis-server %s; restarting it", describe_status(status))
        self.server.forget()
        try:
            self.server.start()
        except SmqsupError as exc:
            log.error("embedded redis-server did not restart: %s", exc)

    def _reclaim(self, queue: str, consumer_id: str, costs: bool, reason: str, threshold: int,
                 stale_after_ms: int = 0) -> Optional[int]:
        """Return a consumer's messages now; if Redis cannot take it, queue the
        reclaim for the next ticks. Returns how many messages moved (None:
        postponed, not known yet)."""
        item = (queue, consumer_id, costs, reason, threshold, stale_after_ms)
        moved = self._run_reclaim(item)
        if moved is None:
            self._pending_reclaims.append(item)
        return moved

    def _retry_reclaims(self) -> None:
        """Run queued reclaims; keep the ones Redis could not take (retried
        about once a second: a refusal, such as a key of the wrong type, may
        last, and is not worth a round trip per reclaim per tick)."""
        now = time.monotonic()
        if not self._pending_reclaims or now < self._next_reclaim_retry:
            return
        self._next_reclaim_retry = now + defaults.RECLAIM_RETRY_S
        self._pending_reclaims = [item for item in self._pending_reclaims if self._run_reclaim(item) is None]

    def _run_reclaim(self, item: tuple[str, str, bool, str, int, int]) -> Optional[int]:
        queue, cid, costs, reason, threshold, stale_after_ms = item
        try:
            if stale_after_ms:
                r = self.broker.reclaim_stale(queue, cid, retry_threshold=threshold, reason=reason,
                                              stale_after_ms=stale_after_ms)
            else:
                give_back = self.broker.reclaim_dead if costs else self.broker.return_stopped
                r = give_back(queue, cid, retry_threshold=threshold, reason=reason)
        except BrokerError as exc:
            self._trouble.report(("reclaim", queue, cid), str(exc), "queue %s: reclaim of consumer %s postponed "
                                 "(retried each second, said again if the cause changes): %s", queue, cid, exc)
            return None
        self._trouble.clear(("reclaim", queue, cid), "queue %s: postponed reclaim of consumer %s done", queue, cid)
        if r.requeued or r.dead_lettered:
            log.info("queue %s: reclaimed %d message(s) of consumer %s (%s): %d to pending, %d dead-lettered",
                     queue, r.requeued + r.dead_lettered, cid, reason, r.requeued, r.dead_lettered)
        return r.requeued + r.dead_lettered

    # --- heartbeats -----------------------------------------------------------------

    def heartbeat(self) -> None:
        """Renew the heartbeats of all live children in one round trip."""
        now = time.monotonic()
        if now < self._next_heartbeat:
            return
        self._next_heartbeat = now + self.cfg.heartbeat_interval_s
        beats: dict[str, list[tuple[str, ConsumerInfo]]] = {}
        for c in self.children.values():
            if c.ready and not _is_stopped(c.pid):
                beats.setdefault(c.queue, []).append((c.consumer_id, self._beat_info(c)))
        try:
            lost, refused = self.broker.heartbeat(beats)
        except BrokerError as exc:
            self._trouble.report("heartbeats", "not sent", "heartbeats not sent: %s", exc)
            self.collector.redis_trouble()
            return
        self._trouble.clear("heartbeats", "heartbeats sent again")
        if refused and refused.keys() >= beats.keys():
            # Refused everywhere (OOM, most likely): other hosts' heartbeats
            # are refused as well, so reclaim nowhere for a while.
            self.collector.redis_trouble()
        self._heartbeats_refused(refused)
        by_id = {c.consumer_id: c for c in self.children.values()}
        for queue, cid in lost:
            dead = by_id.get(cid)
            if dead is not None and not dead.stopping:
                log.warning("queue %s: consumer #%d (pid %d) was declared dead by the garbage collector "
                            "(its messages were requeued); replacing it", queue, dead.index, dead.pid)
                self._stop_child(dead, StopReason.DECLARED_DEAD)

    def _heartbeats_refused(self, refused: dict[str, str]) -> None:
        """Queues whose heartbeats Redis refused: said once per cause, and no
        reclaim there by our collector until they have flowed a while again."""
        for queue, text in refused.items():
            self.collector.redis_trouble(queue)
            self._trouble.report(("refused", queue), text, "queue %s: heartbeats refused (said again if the "
                                 "cause changes): %s", queue, text)
        for queue in self.queues.keys() - refused.keys():
            self._trouble.clear(("refused", queue), "queue %s: heartbeats accepted again", queue)

    def _beat_info(self, c: Child) -> ConsumerInfo:
        """What a child's heartbeat carries: who it is, its resources, and its
        counters (read from its slot: no Redis call in the child for stats)."""
        view = self.slots.read(c.slot)
        now = time.monotonic()
        return ConsumerInfo(
            pid=c.pid, host=self.host, queue=c.queue, index=c.index, supervisor=self.pid,
            started_at=round(time.time() - (now - c.started_at), 3), cpu=round(c.cpu_percent, 1),
            rss=c.rss_bytes, uss=c.uss_bytes, busy=view.busy_since_us != 0, received=view.received,
            acked=view.acked, retried=view.retried, dead_lettered=view.dead_lettered, late_acks=view.late_acks,
            busy_s=round(view.busy_us / 1e6, 3), rate=c.meter.update(view.received))

    # --- limits ------------------------------------------------------------------

    def check_limits(self) -> None:
        """message_timeout (kill), max_memory (graceful recycle), resource samples."""
        now = time.monotonic()
        now_us = monotonic_us()
        sample = now >= self._next_sample
        if sample:
            self._next_sample = now + self.cfg.heartbeat_interval_s
        for c in list(self.children.values()):
            q = self.queues.get(c.queue)
            view = self.slots.read(c.slot)
            busy_us, c.messages = view.busy_since_us, view.received
            if q is None or c.stopping:
                continue
            timeout = q.config.message_timeout_s
            if timeout and busy_us and now_us - busy_us > timeout * 1e6:
                self._kill(c, StopReason.TIMEOUT)
                continue
            if sample:
                self._sample(c)
                limit = q.config.max_memory_bytes
                if limit and c.rss_bytes > limit:
                    log.warning("queue %s: consumer #%d (pid %d) uses %d MB > max_memory %d MB; recycling it",
                                c.queue, c.index, c.pid, c.rss_bytes >> 20, limit >> 20)
                    self._stop_child(c, StopReason.RECYCLE)

    def _update_ready(self) -> None:
        """Children that reported ready in their slot (also while stopping: a
        ready child must get its heartbeats until it exits)."""
        for c in self.children.values():
            if not c.ready and self.slots.read(c.slot).ready_us:
                c.ready = True
                log.info("queue %s: consumer #%d (pid %d) ready", c.queue, c.index, c.pid)

    def _sample(self, c: Child) -> None:
        """CPU% and RSS every heartbeat interval (cheap: /proc/PID/stat and
        statm); USS every USS_SAMPLE_S (it reads smaps_rollup, ten times dearer)."""
        try:
            proc = _process(c.pid)
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

    # --- reconcile ---------------------------------------------------------------

    def reconcile(self) -> None:
        """Move each queue's children toward its target count and generation."""
        now = time.monotonic()
        for name, q in list(self.queues.items()):
            live = [c for c in self.children.values() if c.queue == name and not c.stopping]
            if q.removed:
                for c in live:
                    self._stop_child(c, StopReason.DRAIN)
                continue
            if q.fatal:
                continue
            current = [c for c in live if c.generation == q.generation]
            old = [c for c in live if c.generation != q.generation]
            if old:
                self._roll(q, current, old, now)
            else:
                self._scale(q, current, now)
            if q.failures and any(c.ready and now - c.started_at >= defaults.RESTART_BACKOFF_RESET_S
                                  for c in current):
                q.failures, q.backoff_s = 0, defaults.RESTART_BACKOFF_MIN_S

    def _scale(self, q: QueueState, current: list[Child], now: float) -> None:
        while len(current) < q.target and now >= q.next_start_at:
            c = self.spawn(q)
            if c is None:  # no free slot
                break
            current.append(c)
            if q.failures:  # backing off: one attempt at a time
                break
        if len(current) > q.target:
            # Idle children first, then the newest: the busiest keep their work.
            surplus = sorted(current, key=lambda c: (self.slots.read(c.slot).busy_since_us != 0, -c.started_at))
            for c in surplus[: len(current) - q.target]:
                self._stop_child(c, StopReason.SCALE_DOWN)

    def _roll(self, q: QueueState, current: list[Child], old: list[Child], now: float) -> None:
        """One at a time: start a new child, and once it is ready stop an old one."""
        # An old child told to stop may still be finishing its message; starting
        # the next new one before it exits would run target + 2 processes.
        rolling_out = any(c.queue == q.config.name and c.stop_reason is StopReason.ROLL
                          for c in self.children.values())
        if rolling_out or any(not c.ready for c in current):
            return
        if len(current) + len(old) > q.target:
            self._stop_child(min(old, key=lambda c: c.started_at), StopReason.ROLL)
        elif len(current) < q.target and now >= q.next_start_at:
            self.spawn(q)

    # --- children ----------------------------------------------------------------

    def spawn(self, q: QueueState) -> Optional[Child]:
        """Fork one consumer of queue ``q``; None when every child slot is taken."""
        name = q.config.name
        try:
            slot = self.slots.allocate()
        except IndexError:
            # Only a pile of children still stopping fills the table (the config
            # bounds consumers to a quarter of it): wait for them, keep the rest.
            self._refuse_spawn(name, f"all {MAX_SLOTS} child slots are in use (children still "
                                     "stopping?); starting it once one is free")
            return None
        used = {c.index for c in self.children.values() if c.queue == name and not c.stopping}
        index = q.free_index(used)
        token = os.urandom(3).hex()
        try:
            pid = os.fork()
        except OSError as exc:  # EAGAIN: a process limit (ulimit -u) reached
            self.slots.release(slot)
            self._refuse_spawn(name, f"fork failed ({exc.strerror or exc}); trying again each tick")
            return None
        self._trouble.clear("spawn", "queue %s: starting consumers again", name)
        if pid == 0:
            child_mod.run(child_mod.ChildSpec(
                config=self.cfg, queue=q.config, url=self.url, consumer_id=f"{self.host}:{os.getpid()}:{token}",
                index=index, slot=slot, slots=self.slots, parent_pid=self.pid, handler=self.preloaded.get(name)))
        c = Child(pid, name, index, f"{self.host}:{pid}:{token}", q.generation, slot, time.monotonic())
        self.children[pid] = c
        q.starts.append(c.started_at)
        del q.starts[:-20]
        log.info("queue %s: consumer #%d started (pid %d)", name, index, pid)
        return c

    def _refuse_spawn(self, name: str, why: str) -> None:
        """Start no child now; say why once, not on every tick that tries again."""
        self._trouble.report("spawn", why, "queue %s: not starting a consumer: %s", name, why, level=logging.ERROR)

    def _stop_child(self, c: Child, reason: StopReason) -> None:
        """Graceful: SIGTERM now, SIGKILL after shutdown_timeout (no attempt lost)."""
        if c.stopping:
            return
        c.stop_reason = reason
        c.kill_at = time.monotonic() + self.cfg.shutdown_timeout_s
        _signal(c.pid, signal.SIGTERM)

    def _kill(self, c: Child, reason: StopReason) -> None:
        c.stop_reason = reason
        c.kill_at = None
        _signal(c.pid, signal.SIGKILL)

    # --- shutdown ----------------------------------------------------------------

    def _begin_shutdown(self) -> None:
        if not self._stopping:
            self._stopping = True
            self._stop_deadline = time.monotonic() + self.cfg.shutdown_timeout_s + 5.0
            self.notifier.stopping()
        deadline = time.monotonic() + self.cfg.shutdown_timeout_s
        self._stop_web()
        for c in self.children.values():
            if c.stop_reason is None:
                c.stop_reason = StopReason.SHUTDOWN
                c.kill_at = deadline
                _signal(c.pid, signal.SIGTERM)

    def _enforce_deadlines(self) -> None:
        """SIGKILL children whose graceful stop overran; their reclaim stays free."""
        now = time.monotonic()
        if self.web_pid is not None and self._web_kill_at is not None and now >= self._web_kill_at:
            self._web_kill_at = None
            _signal(self.web_pid, signal.SIGKILL)
        for c in self.children.values():
            if c.kill_at is not None and now >= c.kill_at:
                log.warning("queue %s: consumer #%d (pid %d) did not stop in time; killing it, its message "
                            "goes back to pending without costing an attempt", c.queue, c.index, c.pid)
                c.kill_at = None
                c.killed_by_us = True
                _signal(c.pid, signal.SIGKILL)

    # --- systemd -----------------------------------------------------------------

    def _notify(self) -> None:
        if not self._stopping:
            self.notifier.status(self.status_line())
        if not self._stopping and not self._ready_sent and self.converged():
            self._ready_sent = True
            self.notifier.ready(self.status_line())
            log.info("all consumers ready: %s", self.status_line())
        interval = self.notifier.watchdog_interval_s
        if interval is not None and time.monotonic() >= self._next_watchdog:
            self._next_watchdog = time.monotonic() + interval
            self.notifier.watchdog()

    def converged(self) -> bool:
        """Every non-FATAL queue runs its target of ready, current children."""
        for name, q in self.queues.items():
            if q.fatal:
                continue
            mine = [c for c in self.children.values() if c.queue == name]
            if q.removed:
                if mine:
                    return False
                continue
            if len(mine) != q.target or not all(c.ready and c.generation == q.generation and not c.stopping
                                                for c in mine):
                return False
        return True

    def status_line(self) -> str:
        parts = []
        for name, q in sorted(self.queues.items()):
            mine = [c for c in self.children.values() if c.queue == name and not c.stopping]
            ready = sum(1 for c in mine if c.ready)
            if q.fatal:
                parts.append(f"{name} FATAL ({q.fatal})")
            else:
                parts.append(f"{name} {ready}/{q.target}")
        return "consumers ready: " + ", ".join(parts)


def _clean_exit(status: int) -> bool:
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_OK


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # already dead: the next reap deals with it
        pass


_PROCS: dict[int, psutil.Process] = {}


def _process(pid: int) -> psutil.Process:
    """A cached psutil handle (cpu_percent needs the previous sample)."""
    proc = _PROCS.get(pid)
    if proc is None or not proc.is_running():
        proc = _PROCS[pid] = psutil.Process(pid)
    return proc


def _is_stopped(pid: int) -> bool:
    """True if the process is stopped (SIGSTOP, a debugger): not working, so
    its heartbeat must lapse. A busy process, even one stuck in C code, runs."""
    try:
        return _process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def _set_title(title: str) -> None:
    try:
        from setproctitle import setproctitle
    except ImportError:
        return
    setproctitle(title)
