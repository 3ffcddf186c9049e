"""Start and stop a private redis-server (embedded mode and test fixtures):
RedisServer, one such process serving one data directory.

A data directory is the identity of a server: it holds the AOF, ``redis.log``,
``redis.pid`` and (when the path is short enough) ``redis.sock``. Any process
can find the live server of a data directory with ``discovery.running_url(data_dir)``,
because ``discovery.socket_path(data_dir)`` is a pure function of the directory's path.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import logging
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from smqsup import defaults
from smqsup.errors import RedisServerError
from smqsup.launch import discovery
from smqsup.launch.discovery import find_redis_server, ping, running_url, socket_path

if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger(__name__)

#: The appendfsync policies redis-server accepts.
APPENDFSYNC_POLICIES = ("always", "everysec", "no")

_POLL_INTERVAL_S = 0.01
_POLL_INTERVAL_MAX_S = 0.1
_LOG_TAIL_LINES = 15
_LOG_TAIL_BYTES = 8192
#: prctl(2)'s option asking the kernel for a signal when the parent dies (Linux).
_PR_SET_PDEATHSIG = 1


def _log_tail(log_path: Path) -> str:
    """Last lines of the server log, or a note that there is none."""
    try:
        with log_path.open("rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - _LOG_TAIL_BYTES))
            data = file.read()
    except OSError as error:
        return f"(no log: {error.strerror})"
    lines = data.decode("utf-8", "replace").splitlines()[-_LOG_TAIL_LINES:]
    return "\n".join(lines) if lines else "(log is empty)"


def _ensure_private_dir(path: Path, what: str) -> None:
    """Create ``path`` (mode 0700) if missing; refuse, in one line, one that
    is not a directory of ours writable by us alone (another user could
    plant or swap files in it)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    why = discovery.not_private(info, os.geteuid())
    if why is not None:
        raise RedisServerError(f"{path}: {what} of the embedded redis-server is not private ({why}): "
                               f"make it a directory of uid {os.geteuid()}, mode 0700, or remove it")


def _open_append(path: Path) -> IO[bytes]:
    """``path`` opened for appending, created 0600 if missing: never through
    a link, never blocking on a FIFO; OSError if it is not a regular file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


def _touch(path: Path) -> None:
    _open_append(path).close()


def _death_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the child when this thread
    ends (prctl PR_SET_PDEATHSIG), and ends the child at once if its parent
    died before the call; None where there is no prctl (not Linux). prctl
    is looked up here, before the fork: the child only calls it."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # died between the fork and the prctl: no signal would come
            os._exit(1)
    return preexec


class RedisServer:
    """One redis-server child process serving one data directory.

    Invariants: we only ever signal the pid we started (through our Popen, so
    a recycled pid is never hit); at most one live server per data directory
    (``start`` refuses otherwise); every started server is stopped at
    interpreter exit if nobody stopped it before.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        appendfsync: str = defaults.APPENDFSYNC,
        binary: str | None = None,
        extra_args: Sequence[str] = (),
        dies_with_parent: bool = False,
    ) -> None:
        """Describe a server; start nothing.

        ``port`` None: unix socket only (TCP port 0). ``port`` given: also
        listen on 127.0.0.1:port. ``binary`` None: ``find_redis_server()`` at
        ``start``. ``extra_args`` are appended to the command line
        (``["--maxmemory", "100mb"]``) and so override ours.
        ``dies_with_parent``: the kernel SIGKILLs the server when the thread
        that started it ends, however it ends (SIGKILL included: no atexit
        runs then), on Linux; for throwaway servers (a test run's).
        """
        if appendfsync not in APPENDFSYNC_POLICIES:
            raise RedisServerError(
                f"appendfsync: expected one of {', '.join(APPENDFSYNC_POLICIES)}, got {appendfsync!r}"
            )
        if port is not None and (isinstance(port, bool) or not 0 < port < 65536):
            raise RedisServerError(f"port: expected 1..65535, got {port!r}")
        self.data_dir = data_dir.expanduser().resolve()
        self.port = port
        self.appendfsync = appendfsync
        self.binary = binary
        self.extra_args = tuple(extra_args)
        self.dies_with_parent = dies_with_parent
        self.socket_path = socket_path(self.data_dir)
        self.log_path = self.data_dir / "redis.log"
        self.pid_path = self.data_dir / "redis.pid"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``unix:///abs/redis.sock`` without a port, else ``redis://127.0.0.1:<port>/0``."""
        if self.port is None:
            return f"unix://{self.socket_path}"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """Pid of our server while it runs, else None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def running(self) -> bool:
        """True while the process we started has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def _command(self, binary: str) -> list[str]:
        """The argv that starts this server with ``binary`` (config on the command line)."""
        args = [
            binary,
            "--port", str(self.port or 0),
            "--bind", "127.0.0.1",
            "--unixsocket", os.fspath(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", os.fspath(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--logfile", os.fspath(self.log_path),
            "--pidfile", os.fspath(self.pid_path),
            "--daemonize", "no",
        ]  # fmt: skip
        return args + list(self.extra_args)

    def start(self, timeout_s: float = defaults.REDIS_START_TIMEOUT_S) -> None:
        """Start the server and return once it answers PING.

        Raises RedisServerError if no binary is found, if this object or any
        other process already runs a live server for data_dir, or if the
        server exits or does not answer within ``timeout_s`` (it is then
        killed; the message carries the tail of ``redis.log``).
        """
        if self.running():
            raise RedisServerError(f"{self.data_dir}: already started (pid {self.pid})")
        binary = self.binary or find_redis_server()
        try:
            self._prepare_dirs()
        except RedisServerError:
            raise
        except OSError as error:
            reason = "not a directory" if isinstance(error, FileExistsError) else error.strerror or error
            raise RedisServerError(f"{self.data_dir}: cannot use it as the data directory of the "
                                   f"embedded redis-server ({reason})") from None
        deadline = time.monotonic() + timeout_s
        # The lock makes "nobody serves data_dir" and "ours now does" one step:
        # without it two starters could both see no server, and the second
        # redis-server would unlink the first one's socket and share its AOF.
        # It is released once ours answers PING; from then on PING is the lock.
        with self._start_lock(deadline):
            live = running_url(self.data_dir)
            if live is not None:
                raise RedisServerError(
                    f"{self.data_dir}: a redis-server already serves this directory at {live}"
                )
            self._spawn(binary)
            self._wait_ready(deadline, timeout_s)
        log.info(
            "redis-server pid %d serving %s at %s", self.pid, self.data_dir, self.url
        )

    def _prepare_dirs(self) -> None:
        """Create the data (and socket) directory, and check that redis-server
        can write its files there; OSError otherwise (a file in the way, a
        read-only or unwritable directory)."""
        _ensure_private_dir(self.data_dir, "data directory")
        if self.socket_path.parent != self.data_dir:
            _ensure_private_dir(self.socket_path.parent, "socket directory")
        _touch(self._start_lock(0.0).path)
        _touch(self.log_path)

    def _start_lock(self, deadline: float) -> _FileLock:
        return _FileLock(self.data_dir / "redis.lock", deadline)

    def _spawn(self, binary: str) -> None:
        # stdout/stderr go to the log too: config errors are printed before
        # redis-server opens its logfile. A new session keeps a terminal's
        # Ctrl-C away from it, so its owner decides when it stops (last).
        with _open_append(self.log_path) as log_file:
            try:
                self._proc = subprocess.Popen(
                    self._command(binary),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=log_file,
                    start_new_session=True,
                    preexec_fn=_death_with_parent() if self.dies_with_parent else None,
                )
            except OSError as error:
                raise RedisServerError(
                    f"{binary}: cannot run: {error.strerror}"
                ) from error
        self._owner_pid = os.getpid()
        # Registered before the wait, so an interrupt there cannot leak the server.
        atexit.register(self.stop)

    def _wait_ready(self, deadline: float, timeout_s: float) -> None:
        """Poll PING until it answers; on exit or timeout raise (killing ours first)."""
        proc = self._proc
        assert proc is not None, "_spawn() sets _proc"
        interval = _POLL_INTERVAL_S
        while True:
            status = proc.poll()
            if status is not None:
                self._proc = None
                atexit.unregister(self.stop)
                raise RedisServerError(
                    f"redis-server for {self.data_dir} exited with status {status} before "
                    f"answering PING; end of {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            if ping(self.socket_path):
                return
            if time.monotonic() >= deadline:
                self.kill()
                raise RedisServerError(
                    f"redis-server for {self.data_dir} did not answer PING within "
                    f"{timeout_s} s; end of {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            time.sleep(interval)
            interval = min(interval * 2, _POLL_INTERVAL_MAX_S)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop gracefully and reap: SIGTERM (Redis flushes and fsyncs the AOF, removes
        socket and pid file), SIGKILL if still alive after ``timeout_s``.

        Idempotent; does nothing if never started. Only our own pid is signalled.
        """
        proc = self._proc
        # A forked child (a consumer) inherits this object: only the process
        # that started the server may stop it.
        if proc is None or getattr(self, "_owner_pid", os.getpid()) != os.getpid():
            return
        atexit.unregister(self.stop)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.error(
                    "redis-server pid %d serving %s ignored SIGTERM for %s s: killing it",
                    proc.pid, self.data_dir, timeout_s,
                )  # fmt: skip
                proc.kill()
                proc.wait()
        else:
            log.warning(
                "redis-server pid %d serving %s had already exited with status %s",
                proc.pid, self.data_dir, proc.returncode,
            )  # fmt: skip
        self._proc = None
        self._remove_socket_dir()
        log.info("redis-server serving %s stopped", self.data_dir)

    def _remove_socket_dir(self) -> None:
        """The short socket directory (under /tmp) goes with its server,
        when empty (the server removed its socket) and still ours."""
        parent = self.socket_path.parent
        if parent == self.data_dir:
            return
        try:
            if discovery.not_private(parent.lstat(), os.geteuid()) is None:
                parent.rmdir()
        except OSError:
            pass

    def forget(self) -> None:
        """The server process was reaped by someone else (a supervisor's
        waitpid(-1) loop): drop it so that start() may run a new one."""
        if self._proc is not None:
            self._proc.returncode = -1
            self._proc = None
        atexit.unregister(self.stop)

    def kill(self) -> None:
        """SIGKILL the server and reap it, as a crash would end it.

        Whatever reached the AOF survives (all acknowledged writes with
        appendfsync always); ``start()`` on the same data_dir replays it.
        Idempotent.
        """
        proc = self._proc
        if proc is None:
            return
        atexit.unregister(self.stop)
        proc.kill()
        proc.wait()
        self._proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RedisServer({self.data_dir}, url={self.url!r}, pid={self.pid})"


class _FileLock:
    """An exclusive flock on ``path``, waited for until ``deadline`` (monotonic)."""

    def __init__(self, path: Path, deadline: float) -> None:
        self.path = path
        self.deadline = deadline
        self._file: IO[bytes] | None = None

    def __enter__(self) -> Self:
        # The fd is close-on-exec, so redis-server never inherits the lock.
        file = _open_append(self.path)
        while True:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= self.deadline:
                    file.close()
                    raise RedisServerError(
                        f"{self.path}: another process is starting a redis-server here"
                    ) from None
                time.sleep(_POLL_INTERVAL_S)
            else:
                self._file = file
                return self

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()  # closing releases the flock
            self._file = None
