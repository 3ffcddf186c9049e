"""sd_notify for the arbiter (READY, RELOADING, STOPPING, STATUS, WATCHDOG) without libsystemd.

The protocol (sd_notify(3)): one AF_UNIX datagram of ``KEY=value`` lines to
the socket named by $NOTIFY_SOCKET, a filesystem path or ``@name`` for the
abstract namespace. Only the main process notifies (the unit says
NotifyAccess=main); children call ``unset_environment`` after the fork.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping, MutableMapping

log = logging.getLogger(__name__)

#: The variables systemd passes to a Type=notify service.
_NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC now, in microseconds (the clock systemd's MONOTONIC_USEC uses)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def _address(value: str) -> str | None:
    """The socket address $NOTIFY_SOCKET names, or None when it is not an AF_UNIX one."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def _line(key: str, value: str | int) -> str:
    """``KEY=value``; a newline in the value would start a bogus field, so it becomes a space."""
    text = value if isinstance(value, str) else str(int(value))
    return f"{key}={' '.join(text.splitlines())}"


class Notifier:
    """Sends sd_notify datagrams to $NOTIFY_SOCKET (a path, or '@name' for the abstract namespace).

    Disabled (all methods no-ops) when NOTIFY_SOCKET is unset, empty, or not an
    AF_UNIX address (``vsock:`` is not supported: a warning says so once).
    Never raises: a send failure is logged once at warning level, and
    notification continues to be attempted; after a send succeeds again, the
    next failure is logged again. A send never blocks: a full queue drops the datagram.
    Not for use in a forked child: the socket belongs to the arbiter.
    """

    enabled: bool
    #: How often to send WATCHDOG=1 (half of WatchdogSec), or None for never.
    watchdog_interval_s: float | None

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        """Read NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from ``environ`` (default os.environ)."""
        env = os.environ if environ is None else environ
        configured = env.get("NOTIFY_SOCKET", "")
        self._address = _address(configured) if configured else None
        if configured and self._address is None:
            log.warning("NOTIFY_SOCKET=%r is not a path or @name: systemd notification disabled",
                        configured)
        self.enabled = self._address is not None
        self.watchdog_interval_s = _watchdog_interval_s(env) if self.enabled else None
        self._socket: socket.socket | None = None
        self._failing = False
        self._last_status: str | None = None

    def notify(self, **fields: str | int) -> None:
        """Send ``fields`` as one datagram, ``KEY=value`` lines in the order given."""
        if self._address is None or not fields:
            return
        data = "\n".join(_line(key, value) for key, value in fields.items()).encode("utf-8")
        try:
            self._connected().sendto(data, self._address)
        except OSError as exc:  # includes socket.timeout; nothing a notification does may raise
            if not self._failing:
                log.warning("systemd notification failed (%s): will keep trying", exc)
            self._failing = True
            return
        if self._failing:
            log.info("systemd notification delivered again")
        self._failing = False
        if "STATUS" in fields:
            self._last_status = str(fields["STATUS"])

    def ready(self, status: str | None = None) -> None:
        """READY=1 (start-up or reload complete), with STATUS= in the same datagram when given."""
        if status is None:
            self.notify(READY=1)
        else:
            self.notify(READY=1, STATUS=status)

    def reloading(self) -> None:
        """RELOADING=1 with MONOTONIC_USEC=now; send ``ready()`` when the reload is applied."""
        self.notify(RELOADING=1, MONOTONIC_USEC=monotonic_usec())

    def stopping(self) -> None:
        """STOPPING=1: the graceful stop has begun."""
        self.notify(STOPPING=1)

    def status(self, text: str) -> None:
        """STATUS=text, skipped when ``text`` equals the status last delivered."""
        if text != self._last_status:
            self.notify(STATUS=text)

    def watchdog(self) -> None:
        """WATCHDOG=1: the main loop is alive (send every ``watchdog_interval_s``)."""
        self.notify(WATCHDOG=1)

    def close(self) -> None:
        """Close the socket; a later notification opens a new one."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def _connected(self) -> socket.socket:
        """The non-blocking datagram socket, created on first use (not inherited across exec)."""
        if self._socket is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            # Never block the supervisor's main loop: a full receive queue
            # drops the datagram (logged once) rather than stalling reaping.
            sock.setblocking(False)
            self._socket = sock
        return self._socket


def _watchdog_interval_s(environ: Mapping[str, str]) -> float | None:
    """Half of WATCHDOG_USEC in seconds, when the watchdog is meant for this process."""
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid is not None and pid.strip() != str(os.getpid()):
        return None
    return usec / 2 / 1_000_000


def unset_environment(environ: MutableMapping[str, str]) -> None:
    """Remove NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (a child calls it after the fork)."""
    for name in _NOTIFY_VARIABLES:
        environ.pop(name, None)
