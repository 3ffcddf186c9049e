"""Log setup for the command line: journald priority prefixes under systemd,
plain timestamps otherwise."""

from __future__ import annotations

import logging
import os
import sys

# syslog priorities journald reads from a "<N>" line prefix.
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


class JournalFormatter(logging.Formatter):
    """``<P>name[pid]: message``: journald stamps the time itself, but it
    attributes every line of the stream to the supervisor's pid, so the
    line names the consumer process that wrote it."""

    def format(self, record: logging.LogRecord) -> str:
        prio = _PRIORITY.get(record.levelno, 6)
        return f"<{prio}>{super().format(record)}"


def stderr_is_journal() -> bool:
    """True when stderr is connected to the journal (systemd sets JOURNAL_STREAM
    to the device:inode of that stream)."""
    stream = os.environ.get("JOURNAL_STREAM")
    if not stream:
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


def setup(level: str = "INFO") -> None:
    """Send smqsup's logs to stderr, formatted for the journal or for people."""
    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():
        handler.setFormatter(JournalFormatter("%(name)s[%(process)d]: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
