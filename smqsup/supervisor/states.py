"""The life of the supervisor's children as explicit states, and the one
restart policy used by every queue and by the web UI child (parent side only).

A process (a consumer or the web UI) is in one state, moved only through
``PROCESS_MOVES``::

    fork ─▶ STARTING ─ready─▶ RUNNING
               │                 │
               └──stop / kill──▶ STOPPING ─reaped─▶ EXITED
               └────────────died, reaped─────────────┘

When a process of a group (a queue, the web UI) exits, the group's
``RestartPolicy`` says when the next one may start, through
``POLICY_MOVES``::

    RUNNING ─died at start─▶ BACKOFF ─died at start again─▶ BACKOFF … ─▶ FATAL
       ▲                        │                                      │
       └──ran RESTART_BACKOFF_RESET_S──┘          SIGHUP ──────────────┘

RUNNING: start at once; BACKOFF: not before ``next_start_at``, one start at a
time; FATAL: never, until SIGHUP resets it (supervisord's ``ProcessStates``).
"""

from __future__ import annotations

import enum
import os
import signal
from dataclasses import dataclass, field
from typing import Optional

from smqsup import defaults
from smqsup.config.model import QueueConfig
from smqsup.store.core.consumer_info import RateMeter
from smqsup.supervisor.protocol import EXIT_IMPORT, EXIT_REDIS
from smqsup.worker.sources import Sources


class State(str, enum.Enum):
    """A process's state (STARTING .. EXITED) or a restart policy's (RUNNING, BACKOFF, FATAL)."""

    STARTING = "starting"  # forked, has not reported ready
    RUNNING = "running"  # a process: ready; a policy: start at once
    STOPPING = "stopping"  # asked to stop (SIGTERM, or SIGKILL on a timeout); reaped next
    EXITED = "exited"  # reaped
    BACKOFF = "backoff"  # the next start waits; one at a time
    FATAL = "fatal"  # no start until SIGHUP


#: The legal moves of a process. Anything alive may die (EXITED).
PROCESS_MOVES: dict[State, frozenset[State]] = {
    State.STARTING: frozenset({State.RUNNING, State.STOPPING, State.EXITED}),
    State.RUNNING: frozenset({State.STOPPING, State.EXITED}),
    State.STOPPING: frozenset({State.EXITED}),
    State.EXITED: frozenset(),
}

#: The legal moves of a restart policy. FATAL is left only by a reset (SIGHUP).
POLICY_MOVES: dict[State, frozenset[State]] = {
    State.RUNNING: frozenset({State.BACKOFF, State.FATAL}),
    State.BACKOFF: frozenset({State.BACKOFF, State.RUNNING, State.FATAL}),
    State.FATAL: frozenset({State.RUNNING}),
}


class IllegalMove(RuntimeError):
    """A move the tables do not allow: a bug in the supervisor, never user input."""


def allowed_move(moves: dict[State, frozenset[State]], old: State, new: State) -> State:
    """``new`` if ``old -> new`` is in ``moves``; IllegalMove otherwise."""
    if new not in moves.get(old, frozenset()):
        raise IllegalMove(f"{old.value} -> {new.value}")
    return new


class StopReason(str, enum.Enum):
    """Why the parent stopped a child; every one but TIMEOUT and CANCEL is free of cost."""

    SHUTDOWN = "shutdown"
    SCALE_DOWN = "scale-down"
    ROLL = "roll"
    DRAIN = "queue removed"
    RECYCLE = "max_memory"
    DECLARED_DEAD = "declared dead by the garbage collector"
    TIMEOUT = "timeout"
    CANCEL = "its message was cancelled"  # SIGKILLed at once; the message it ran costs its attempt


@dataclass
class Stop:
    """What the STOPPING state knows: why, and when it turns into a SIGKILL."""

    reason: StopReason
    kill_at: Optional[float]  # monotonic; None: no (further) SIGKILL due
    killed_by_us: bool = False  # our SIGKILL at kill_at ended it: still free of cost


@dataclass
class Child:
    """One forked process as the parent sees it (process liveness only)."""

    pid: int
    queue: str  # "" for the web UI
    index: int
    consumer_id: str
    generation: str
    slot: int
    started_at: float  # time.monotonic()
    concurrency: int = 1  # messages it may run at once (its queue's concurrency when forked)
    state: State = State.STARTING
    stop: Optional[Stop] = None  # set exactly while STOPPING
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    uss_bytes: Optional[int] = None
    next_uss: float = 0.0  # monotonic time of the next USS sample
    meter: RateMeter = field(default_factory=RateMeter)  # handled messages per second
    sources: Optional[Sources] = None  # its handler's files as it imported them (its report), once ready

    def move(self, new: State) -> None:
        self.state = allowed_move(PROCESS_MOVES, self.state, new)

    def stopping_for(self, reason: StopReason, kill_at: Optional[float]) -> None:
        """Enter STOPPING: the caller has just sent SIGTERM (or SIGKILL, ``kill_at`` None)."""
        self.move(State.STOPPING)
        self.stop = Stop(reason, kill_at)

    @property
    def stopping(self) -> bool:
        return self.state is State.STOPPING

    @property
    def live(self) -> bool:
        """Alive and not asked to stop: counts toward its queue's target."""
        return self.state in (State.STARTING, State.RUNNING)

    @property
    def stop_reason(self) -> Optional[StopReason]:
        return self.stop.reason if self.stop else None


@dataclass
class RestartPolicy:
    """When a group's next process may start after one ended (see the module's picture).

    A death "at start" (before any work, within MIN_UPTIME_S) doubles the
    backoff, from RESTART_BACKOFF_MIN_S to RESTART_BACKOFF_MAX_S; ``limit``
    of them in a row make it FATAL (None: never). Any other death lets the
    next start happen at once, without forgetting the failures: a group
    backing off stays one start at a time until a process has run
    RESTART_BACKOFF_RESET_S (``stable``).
    """

    limit: Optional[int] = defaults.RESTART_LIMIT
    state: State = State.RUNNING
    failures: int = 0  # deaths at start in a row
    backoff_s: float = defaults.RESTART_BACKOFF_MIN_S  # the next backoff's length
    next_start_at: float = 0.0  # monotonic
    fatal: Optional[str] = None  # why it gave up, while FATAL

    def _move(self, new: State) -> None:
        self.state = allowed_move(POLICY_MOVES, self.state, new)

    def may_start(self, now: float) -> bool:
        return self.state is not State.FATAL and now >= self.next_start_at

    @property
    def one_at_a_time(self) -> bool:
        return self.state is State.BACKOFF

    def died_at_start(self, now: float) -> float:
        """Count a death at start; the delay before the next start (FATAL past ``limit``)."""
        delay = self.backoff_s
        self.failures += 1
        self.next_start_at = now + delay
        self.backoff_s = min(self.backoff_s * 2, defaults.RESTART_BACKOFF_MAX_S)
        if self.state is State.FATAL:
            return delay  # a sibling of the process that made it FATAL
        if self.limit is not None and self.failures >= self.limit:
            self.give_up(f"consumers keep dying at start ({self.failures} in a row)")
        else:
            self._move(State.BACKOFF)
        return delay

    def died_working(self, now: float) -> None:
        """A death after work began: the next start may come at once."""
        self.next_start_at = min(self.next_start_at, now)

    def give_up(self, why: str) -> None:
        """FATAL, keeping the first reason if it already is."""
        if self.state is not State.FATAL:
            self._move(State.FATAL)
            self.fatal = why

    def stable(self) -> None:
        """A process ran RESTART_BACKOFF_RESET_S: forget the failures (not
        while FATAL: only a reset leaves it)."""
        if self.state is State.FATAL:
            return
        if self.state is State.BACKOFF:
            self._move(State.RUNNING)
        self.failures, self.backoff_s = 0, defaults.RESTART_BACKOFF_MIN_S

    def reset(self) -> None:
        """SIGHUP: start afresh, FATAL included, without waiting out a backoff
        (the reload is taken to bring the fix)."""
        if self.state is not State.RUNNING:
            self._move(State.RUNNING)
        self.failures, self.backoff_s, self.next_start_at, self.fatal = 0, defaults.RESTART_BACKOFF_MIN_S, 0.0, None


@dataclass
class QueueState:
    """A queue's desired state, its restart policy and its roll.

    A roll replaces every child of another generation than ``generation``
    one at a time (decide.py). While it runs, ``rolling_since`` is set; a
    new child of it that cannot import its handler, or ROLL_START_FAILURES
    of them that die at start or while watched (during the roll and
    ROLL_WATCH_S after it), make it fail: ``roll_failed`` says why, the
    children of the old generation still there keep running, and no roll
    step is taken until a reload (or ``smqsup roll``) begins another.
    """

    config: QueueConfig
    generation: str
    target: int
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    removed: bool = False
    restarts: dict[int, int] = field(default_factory=dict)  # slot index -> unplanned exits
    rolls: int = 0  # rolls begun, the suffix of the generation that tells them apart
    rolling_since: Optional[float] = None  # monotonic; None: no roll running
    roll_began: Optional[float] = None  # monotonic: when the last roll began (kept after it ends)
    watch_until: float = 0.0  # monotonic: the last roll's new children are watched until then (ROLL_WATCH_S)
    roll_deaths: int = 0  # new children of the last roll that died at start or while watched
    roll_failed: Optional[str] = None  # one line, until the next roll begins
    roll_next: Optional[str] = None  # a roll asked for while one ran: "check" (the code) or "force"

    @property
    def fatal(self) -> Optional[str]:
        return self.policy.fatal

    @property
    def rolling(self) -> bool:
        return self.rolling_since is not None

    def free_index(self, used: set[int]) -> int:
        n = 1
        while n in used:
            n += 1
        return n


def describe_status(status: int, ready: bool = False) -> str:
    """'exited with status 3' or 'killed by signal 9 (SIGKILL)'; a reserved
    status is explained only in a child that had not said ready (``ready``)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "?"
        return f"killed by signal {sig} ({name})"
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
    meaning = {EXIT_IMPORT: " (handler cannot be imported)", EXIT_REDIS: " (Redis unreachable at boot)"}
    return f"exited with status {code}{'' if ready else meaning.get(code, '')}"
