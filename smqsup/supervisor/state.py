"""The supervisor's bookkeeping of its children and queues (parent side only)."""

from __future__ import annotations

import enum
import os
import signal
from dataclasses import dataclass, field
from typing import Optional

from smqsup import defaults
from smqsup.config import QueueConfig
from smqsup.info import RateMeter
from smqsup.supervisor.protocol import EXIT_IMPORT, EXIT_REDIS


class StopReason(str, enum.Enum):
    """Why the parent stopped a child; every one but TIMEOUT is free of cost."""

    SHUTDOWN = "shutdown"
    SCALE_DOWN = "scale-down"
    ROLL = "config changed"
    DRAIN = "queue removed"
    RECYCLE = "max_memory"
    DECLARED_DEAD = "declared dead by the garbage collector"
    TIMEOUT = "timeout"


@dataclass
class Child:
    """One consumer process, as the parent sees it (process liveness only)."""

    pid: int
    queue: str
    index: int
    consumer_id: str
    generation: str
    slot: int
    started_at: float  # time.monotonic()
    ready: bool = False
    stop_reason: Optional[StopReason] = None
    kill_at: Optional[float] = None  # SIGKILL if still alive then
    killed_by_us: bool = False  # SIGKILLed at the end of a graceful stop (free of cost)
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    uss_bytes: Optional[int] = None
    next_uss: float = 0.0  # monotonic time of the next USS sample
    messages: int = 0
    meter: RateMeter = field(default_factory=RateMeter)  # handled messages per second

    @property
    def stopping(self) -> bool:
        return self.stop_reason is not None


@dataclass
class QueueState:
    """A queue's desired state and its restart bookkeeping."""

    config: QueueConfig
    generation: str
    target: int
    fatal: Optional[str] = None
    failures: int = 0  # consecutive failed starts
    backoff_s: float = defaults.RESTART_BACKOFF_MIN_S
    next_start_at: float = 0.0
    removed: bool = False
    starts: list[float] = field(default_factory=list)  # monotonic times, for status
    restarts: dict[int, int] = field(default_factory=dict)  # slot index -> unplanned exits

    def free_index(self, used: set[int]) -> int:
        n = 1
        while n in used:
            n += 1
        return n


def describe_status(status: int) -> str:
    """'exited with status 3' or 'killed by signal 9 (SIGKILL)'."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "?"
        return f"killed by signal {sig} ({name})"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    meaning = {EXIT_IMPORT: " (handler cannot be imported)", EXIT_REDIS: " (Redis unreachable at boot)"}
    return f"exited with status {code}{meaning.get(code, '')}"
