"""The supervisor's decisions, as pure functions of its state and the time:
which children to start and stop, what a death costs and means, when every
queue is ready. No I/O and no logging here; the arbiter and the consumer pool
carry the decisions out.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Optional, Union

from smqsup import defaults
from smqsup.supervisor.protocol import EXIT_IMPORT, EXIT_OK, SlotView
from smqsup.supervisor.states import Child, QueueState, State, StopReason

#: The web UI child's exit status for "bad web: settings": FATAL until SIGHUP.
WEB_EXIT_CONFIG = 2


@dataclass(frozen=True)
class Start:
    """Fork one more consumer of ``queue``."""

    queue: str


@dataclass(frozen=True)
class StopChild:
    """Stop ``child`` gracefully (SIGTERM, SIGKILL after shutdown_timeout)."""

    child: Child
    reason: StopReason


Action = Union[Start, StopChild]


def queue_actions(q: QueueState, mine: Sequence[Child], now: float,
                  busy: Callable[[Child], bool]) -> list[Action]:
    """What moves queue ``q`` toward its target count and generation.

    ``mine`` are the queue's children in any state; ``busy`` tells whether
    one is handling a message. A removed queue drains; a FATAL one is left
    as it is; an old generation rolls, unless the roll failed (its children
    of both generations are then kept, and only the count is kept);
    otherwise the count is scaled.
    """
    live = [c for c in mine if c.live]
    if q.removed:
        return [StopChild(c, StopReason.DRAIN) for c in live]
    if q.policy.state is State.FATAL:
        return []
    finishing = sum(1 for c in mine if c.stopping and busy(c))
    if q.roll_failed is not None:
        return _scale(q, live, finishing, now, busy)
    current = [c for c in live if c.generation == q.generation]
    old = [c for c in live if c.generation != q.generation]
    if old:
        return _roll(q, mine, current, old, now)
    return _scale(q, current, finishing, now, busy)


def _scale(q: QueueState, current: list[Child], finishing: int, now: float,
           busy: Callable[[Child], bool]) -> list[Action]:
    """Starts or stops toward the target; ``finishing``: children told to
    stop that still run a message.

    Handlers of a queue never outnumber its target: a child still finishing
    its message after a stop holds its place until it exits, so a SIGTTOU
    and a SIGTTIN (or a max_memory recycle) never run a replacement beside
    the message it stopped. (A child told to stop takes nothing more; only
    one that had its message in hand before the SIGTERM landed, and not yet
    in its slot, can slip past this count.)
    """
    missing = q.target - len(current)
    if missing > 0:
        missing -= finishing
        if missing <= 0 or not q.policy.may_start(now):
            return []
        return [Start(q.config.name)] * (1 if q.policy.one_at_a_time else missing)
    # Idle children first, then the newest: the busiest keep their work.
    surplus = sorted(current, key=lambda c: (busy(c), -c.started_at))[: -missing]
    return [StopChild(c, StopReason.SCALE_DOWN) for c in surplus]


def _roll(q: QueueState, mine: Sequence[Child], current: list[Child], old: list[Child],
          now: float) -> list[Action]:
    """One at a time: start a new child, and once it is ready stop an old one.

    The first old child stops only once a new one has run MIN_UPTIME_S: a
    generation whose consumers die at start (after they said ready) fails
    its roll before it has replaced any old child.
    """
    # An old child told to stop may still be finishing its message; starting
    # the next new one before it exits would run target + 2 processes.
    rolling_out = any(c.stop_reason is StopReason.ROLL for c in mine)
    if rolling_out or any(c.state is State.STARTING for c in current):
        return []
    if len(current) + len(old) > q.target:
        if current and not any(now - c.started_at >= defaults.MIN_UPTIME_S for c in current):
            return []  # the first new child is on probation
        # (No new child yet and more old ones than the target, the target
        # lowered meanwhile: the surplus old ones go first.)
        return [StopChild(min(old, key=lambda c: c.started_at), StopReason.ROLL)]
    if len(current) < q.target and q.policy.may_start(now):
        return [Start(q.config.name)]
    return []


def ran_long_enough(mine: Iterable[Child], generation: str, now: float) -> bool:
    """A current child has been ready RESTART_BACKOFF_RESET_S: the queue is healthy again."""
    return any(c.state is State.RUNNING and c.generation == generation
               and now - c.started_at >= defaults.RESTART_BACKOFF_RESET_S for c in mine)


# --- deaths -------------------------------------------------------------------


class Death(enum.Enum):
    """What an exit the supervisor did not ask for means for the queue."""

    CLEAN = "clean"  # status 0 after ready (max_messages): replace at once
    WORKING = "working"  # it took a message, or had settled: replace at once
    AT_START = "at start"  # nothing taken, soon after its start: back off
    CANNOT_RUN = "cannot run"  # handler import failed (a queue), bad settings (the web UI): FATAL


def costs_attempt(c: Child) -> bool:
    """Whether the messages a dead child held cost an attempt.

    Any death the supervisor did not ask for costs one, whenever it came, so
    that no message is redelivered for ever; so does a message_timeout kill.
    A stop we asked for is free, our SIGKILL at its deadline included; any
    other death during it is not (a clean exit has emptied its list already).
    A cancel's SIGKILL costs one too (the message ran; its reclaim
    dead-letters it "cancelled" whatever the cost).
    """
    if c.stop is None or c.stop.reason in (StopReason.TIMEOUT, StopReason.CANCEL):
        return True
    return not c.stop.killed_by_us


def clean_exit(status: int) -> bool:
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_OK


def death(status: int, view: SlotView, held: Optional[int], uptime_s: float) -> Death:
    """Classify an unplanned exit from the child's status, its shared slot and
    what its processing list held (None: not known yet).

    Working means it took a message: its slot counted one, it was busy, or its
    list held one (read from the slot and the reclaim, never from the parent's
    own "ready" bookkeeping, which may lag behind a child that took a message
    and died at once). Status 0 before "ready" is no clean exit: handler code
    that ends the process while it is imported must back off, not loop. The
    reserved statuses mean what they say only before "ready": after it, the
    status 3 of a handler or native library (sys.exit(3), os._exit(3)) is an
    ordinary death, or one poison message would make its queue FATAL.
    """
    if clean_exit(status) and view.ready_us != 0:
        return Death.CLEAN
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_IMPORT and view.ready_us == 0:
        return Death.CANNOT_RUN
    took_message = view.received > 0 or view.busy_since_us != 0 or bool(held)
    settled = view.ready_us != 0 and uptime_s >= defaults.MIN_UPTIME_S
    return Death.WORKING if took_message or settled else Death.AT_START


def web_death(status: int, uptime_s: float) -> Death:
    """The web UI child's exit: bad settings are FATAL (until SIGHUP)."""
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == WEB_EXIT_CONFIG:
        return Death.CANNOT_RUN
    return Death.AT_START if uptime_s < defaults.MIN_UPTIME_S else Death.WORKING


# --- deadlines ------------------------------------------------------------------


def overdue(children: Iterable[Child], now: float) -> list[Child]:
    """Children whose graceful stop ran past its deadline: SIGKILL them."""
    return [c for c in children if c.stop is not None and c.stop.kill_at is not None and now >= c.stop.kill_at]


def kill_after_s(message_timeout_s: float, concurrency: int) -> float:
    """How long a consumer's oldest message may run before the supervisor
    kills the process: message_timeout for a sequential consumer (nothing
    else stops its handler); later for a concurrent one, which cancels a
    message past message_timeout itself, so that only a stuck event loop is
    killed, never a loop about to cancel."""
    if not message_timeout_s or concurrency <= 1:
        return message_timeout_s
    return message_timeout_s + defaults.STUCK_LOOP_GRACE_S


def over_time(busy_since_us: int, now_us: int, message_timeout_s: float) -> bool:
    """The current message has run past message_timeout (0: no limit)."""
    return bool(message_timeout_s) and busy_since_us != 0 and now_us - busy_since_us > message_timeout_s * 1e6


# --- readiness --------------------------------------------------------------------


def converged(queues: Mapping[str, QueueState], children: Iterable[Child]) -> bool:
    """Every non-FATAL queue runs its target of ready, current children."""
    by_queue: dict[str, list[Child]] = {}
    for c in children:
        by_queue.setdefault(c.queue, []).append(c)
    for name, q in queues.items():
        if q.fatal:
            continue
        mine = by_queue.get(name, [])
        if q.removed:
            if mine:
                return False
            continue
        current = q.roll_failed is not None  # a failed roll keeps both generations
        if len(mine) != q.target or not all(c.state is State.RUNNING and (current or c.generation == q.generation)
                                            for c in mine):
            return False
    return True


def status_line(queues: Mapping[str, QueueState], children: Iterable[Child]) -> str:
    """``consumers ready: a 2/2, b FATAL (handler cannot be imported), c 1/2 (rolling)``."""
    ready: dict[str, int] = {}
    for c in children:
        if c.state is State.RUNNING:
            ready[c.queue] = ready.get(c.queue, 0) + 1
    parts = [f"{name} FATAL ({q.fatal})" if q.fatal else f"{name} {ready.get(name, 0)}/{q.target}{_roll_note(q)}"
             for name, q in sorted(queues.items())]
    return "consumers ready: " + ", ".join(parts)


def _roll_note(q: QueueState) -> str:
    if q.roll_failed is not None:
        cut = q.roll_failed if len(q.roll_failed) <= 160 else q.roll_failed[:157] + "..."
        return f" (roll failed: {cut})"
    return " (rolling)" if q.rolling else ""
