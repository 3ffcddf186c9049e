"""What runs in a consumer process after the supervisor forks it.

    fork ─▶ reset signals, PDEATHSIG, title, reseed ─▶ import handler ─▶ new
    Redis client, PING ─▶ slot "ready" ─▶ Consumer.run() ─▶ os._exit(status)

The child never returns into the parent's code: it leaves with os._exit, so
the parent's atexit handlers (which stop the embedded redis-server) and
buffered files never run twice.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import NoReturn, Optional

from smqsup import defaults, logs, safe
from smqsup.config.model import Config, QueueConfig
from smqsup.errors import BrokerConnectionError, HandlerImportError, SmqsupError
from smqsup.message import Message
from smqsup.store.broker import Broker
from smqsup.supervisor import systemd
from smqsup.supervisor.protocol import EXIT_ERROR, EXIT_IMPORT, EXIT_OK, EXIT_REDIS, Slots
from smqsup.worker.consumer import Consumer
from smqsup.worker.fetching import fetch_block_s
from smqsup.worker.handlers import import_handler
from smqsup.worker.process_hooks import with_hooks
from smqsup.worker.sources import loaded_since

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
#: After the parent died, the child gets this long to finish its message.
_ORPHAN_GRACE_S = 2


@dataclass(frozen=True)
class ChildSpec:
    """Everything a child needs, fixed by the parent before fork."""

    config: Config
    queue: QueueConfig
    url: str
    consumer_id: str
    index: int  # the "#2" of the title: 1..consumers within the queue
    slot: int
    slots: Slots
    parent_pid: int
    handler: Optional[Callable[[Message], object]] = None  # preloaded by the parent
    reports_fd: int = -1  # the parent's directory for this child's report, open (supervisor/reports.py)


def run(spec: ChildSpec) -> NoReturn:
    """Run the consumer until told to stop, then exit the process."""
    status = EXIT_ERROR
    try:
        status = _main(spec)
    except BaseException:  # noqa: BLE001 - whatever happens, never return to the parent's code
        log.exception("queue %s: consumer #%d crashed", spec.queue.name, spec.index)
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def _main(spec: ChildSpec) -> int:
    # Titled before anything else: until then it bears the supervisor's
    # title, which smqsup roll must never take it for.
    safe.set_title(f"smqsup: consumer {spec.queue.name} #{spec.index} [starting 0 msgs]")
    consumer_box: list[Consumer] = []
    _reset_process(spec, consumer_box)
    logs.set_context(role="consumer", queue=spec.queue.name)
    before = set(sys.modules)
    try:
        handler = spec.handler or import_handler(spec.queue.handler, path=str(spec.config.path),
                                                 key=f"queues.{spec.queue.name}.handler")
        handler = with_hooks(handler, spec.queue, path=str(spec.config.path))
    except HandlerImportError as exc:
        log.error("%s", exc)
        where = f"{exc.path}: {exc.key}: "  # the parent names the queue itself
        _report(spec, json.dumps({"error": str(exc).removeprefix(where)}))
        return EXIT_IMPORT
    if spec.handler is None:  # preloaded: the parent knows the files it imported
        _report(spec, loaded_since(before, spec.queue.handler.split(":", 1)[0]).to_json())
    broker = Broker(spec.url, spec.config.namespace, client_name=f"smqsup-{spec.queue.name}-{spec.index}",
                    stats=spec.config.stats, wait_replicas=spec.config.redis.wait_replicas,
                    wait_timeout_s=spec.config.redis.wait_timeout_s)
    if not _wait_for_redis(broker, spec):
        return EXIT_REDIS
    report = _SlotReport(spec)
    # Declared dead by the collector: stop; the parent starts a replacement.
    consumer = Consumer(broker, spec.queue, handler, consumer_id=spec.consumer_id, on_busy=report.message,
                             on_idle=report.idle, on_lost="stop", fetch_block_s=fetch_block_s(spec.config),
                             unregister_on_stop=False)
    consumer_box.append(consumer)
    report.consumer = consumer
    consumer.start()  # registered in Redis before the parent hears "ready"
    if _stop_requested:
        return EXIT_OK
    report.ready()
    consumer.run()
    broker.close()
    return EXIT_OK


_stop_requested = False


def _report(spec: ChildSpec, text: str) -> None:
    """Leave ``text`` for the parent (supervisor/reports.py) through the
    directory descriptor it inherited, never a path: a new file only
    (O_EXCL), never through a link, never blocking. A report that cannot be
    written only means the parent cannot tell when this code changes."""
    if spec.reports_fd < 0:
        return
    name = f"{os.getpid()}.json"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        info = os.fstat(spec.reports_fd)
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise OSError(f"the report directory is not private (mode {info.st_mode & 0o777:o})")
        try:
            fd = os.open(name, flags, 0o600, dir_fd=spec.reports_fd)
        except FileExistsError:  # an earlier child of the same pid's, never taken: ours to replace
            os.unlink(name, dir_fd=spec.reports_fd)
            fd = os.open(name, flags, 0o600, dir_fd=spec.reports_fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        log.warning("queue %s: consumer #%d: cannot tell the supervisor its handler's files: %s",
                    spec.queue.name, spec.index, exc)


def fork_holding_term() -> int:
    """os.fork() with SIGTERM blocked across it: the parent's mask is restored
    at once (also when the fork fails: OSError), the child's stays blocked
    until it has its own handler (_reset_process, run_web) and unblocks it.

    Invariant: a SIGTERM sent to a child before that (a stop right after a
    fork) waits and lands in the child's handler, never in the one it
    inherited (the supervisor's, which records into a copy nobody reads: the
    child would run on until the supervisor's shutdown_timeout SIGKILLs it)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return pid


def _reset_process(spec: ChildSpec, consumer_box: list[Consumer]) -> None:
    """Start clean: default signals, parent-death signal, no systemd vars, new seed."""
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGHUP, signal.SIGCHLD, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1,
                signal.SIGUSR2, signal.SIGQUIT, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    # A terminal's Ctrl-C reaches the whole process group: the parent decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The supervisor's own signals (systemctl kill reaches the whole cgroup):
    # by default SIGUSR1 ends a process and SIGTTIN/SIGTTOU stop it.
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(sig, signal.SIG_IGN)

    def on_term(signum: int, frame: Optional[FrameType]) -> None:
        # Only record (and arm a deadline if we are an orphan).
        global _stop_requested
        _stop_requested = True
        if consumer_box:
            consumer_box[0].request_stop()
        if os.getppid() != spec.parent_pid:
            signal.alarm(_ORPHAN_GRACE_S)  # default SIGALRM action ends the process

    def on_usr2(signum: int, frame: Optional[FrameType]) -> None:
        # A cancel may concern a message we hold (supervisor/beats.py): only record.
        if consumer_box:
            consumer_box[0].request_cancels()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR2, on_usr2)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one sent since the fork lands now
    _set_parent_death_signal()
    if os.getppid() != spec.parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
    systemd.unset_environment(os.environ)
    random.seed()


def run_web(cfg: Config, url: str, parent_pid: int) -> NoReturn:
    """The web UI as the supervisor's child (the ``web:`` section): serve until
    SIGTERM, then exit the process."""
    status = EXIT_ERROR
    try:
        safe.set_title(f"smqsup: web {cfg.web.listen if cfg.web else ''}")  # never the supervisor's title
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGHUP, signal.SIGCHLD, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1,
                    signal.SIGUSR2, signal.SIGQUIT, signal.SIGALRM, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # (held across the fork: fork_holding_term)
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGTTIN, signal.SIGTTOU):
            signal.signal(sig, signal.SIG_IGN)
        _set_parent_death_signal()
        if os.getppid() != parent_pid:
            os._exit(EXIT_OK)
        systemd.unset_environment(os.environ)
        logs.set_context(role="web")
        from smqsup.web.server import serve

        serve(cfg, url)
        status = EXIT_OK
    except SmqsupError as exc:
        log.error("web UI: %s", exc)
        status = exc.exit_code
    except BaseException:  # noqa: BLE001 - never return to the parent's code
        log.exception("web UI crashed")
    finally:
        logging.shutdown()
        os._exit(status)


def _set_parent_death_signal() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the getppid check still runs
        pass


def _wait_for_redis(broker: Broker, spec: ChildSpec) -> bool:
    deadline = time.monotonic() + defaults.CHILD_BOOT_REDIS_TIMEOUT_S
    delay = defaults.RECONNECT_BACKOFF_MIN_S
    while not _stop_requested:
        try:
            broker.ping()
            return True
        except BrokerConnectionError as exc:
            if time.monotonic() >= deadline:
                log.error("queue %s: consumer #%d: Redis unreachable at boot: %s",
                          spec.queue.name, spec.index, exc)
                return False
            time.sleep(delay)
            delay = min(delay * 2, defaults.RECONNECT_BACKOFF_MAX_S)
    return True


class _SlotReport:
    """What the child tells its parent through its shared slot (protocol.py):
    ready, each message's start (the parent's message_timeout clock, busy
    flag and messages in flight) and end (the counters its heartbeats carry).
    The process title, e.g. ``smqsup: consumer orders #2 [busy 1834 msgs]``
    or, with concurrency 50, ``[busy 37/50 1834 msgs]``, follows at most once
    a second, to keep the per-message cost to a few struct writes, and at
    once when the consumer goes idle (``idle``): the last change of a burst
    is never left out."""

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.consumer: Optional[Consumer] = None
        self._next_title = 0.0
        self._in_flight = 0
        self._title = ""
        self.update()

    def idle(self) -> None:
        """The consumer waits for the queue with nothing in hand: the title
        says so now, whatever the once-a-second pace."""
        if self.consumer is not None:
            self._in_flight = self.consumer.flight()[0]
            self.update()

    def ready(self) -> None:
        """Registered in Redis and about to fetch: the parent may heartbeat it now."""
        self.spec.slots.set_ready(self.spec.slot)
        self.update()

    def message(self, starting: bool) -> None:
        """A frame is about to start (True: counted started before it is even
        decoded), or (False) outcomes were drawn or settled."""
        consumer = self.consumer
        if consumer is None:
            return
        st = consumer.stats
        in_flight, since_us = consumer.flight()
        started, returned = consumer.started()
        if starting:
            in_flight += 1
            self.spec.slots.set_busy(self.spec.slot, st.received, in_flight, since_us, started + 1, returned)
        else:
            self.spec.slots.set_idle(self.spec.slot, st.received, st.acked, st.retried, st.dead_lettered,
                                     st.late_acks, int(st.busy_s * 1e6), in_flight, since_us, started, returned)
        self._in_flight = in_flight
        now = time.monotonic()
        if now >= self._next_title:
            self._next_title = now + 1.0
            self.update()

    def update(self) -> None:
        n = self.consumer.stats.received if self.consumer else 0
        state = "busy" if self._in_flight else ("idle" if self.consumer else "starting")
        size = self.consumer.concurrency if self.consumer else 1
        if size > 1 and self.consumer:
            state = f"{state} {self._in_flight}/{size}"
        title = f"smqsup: consumer {self.spec.queue.name} #{self.spec.index} [{state} {n} msgs]"
        if title != self._title:
            self._title = title
            safe.set_title(title)
