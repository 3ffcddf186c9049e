"""The supervisor's decisions as pure functions: scaling, rolling, draining, deaths, deadlines, readiness."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from smqsup import defaults
from smqsup.config.model import QueueConfig
from smqsup.supervisor import decide
from smqsup.supervisor.decide import Death, Start, StopChild
from smqsup.supervisor.protocol import EXIT_IMPORT, SlotView
from smqsup.supervisor.states import Child, QueueState, State, Stop, StopReason

NOW = 1000.0


def queue(target: int = 2, generation: str = "new", **kw: Any) -> QueueState:
    return QueueState(QueueConfig(name="q", handler="m:f", consumers=target), generation, target, **kw)


def child(pid: int, state: State = State.RUNNING, generation: str = "new", started_at: float = 0.0,
          stop: StopReason | None = None) -> Child:
    c = Child(pid, "q", pid, f"h:{pid}:x", generation, pid, started_at, state=state)
    if stop is not None:
        c.state, c.stop = State.STOPPING, Stop(stop, NOW + 10)
    return c


def idle(c: Child) -> bool:
    return False


def exited(code: int) -> int:
    return code << 8


def killed(sig: int) -> int:
    return sig


def view(ready: bool = True, busy: bool = False, received: int = 0) -> SlotView:
    return SlotView(1 if ready else 0, 1 if busy else 0, received, 0, 0, 0, 0, 0)


# --- scaling -----------------------------------------------------------------------------


def test_missing_children_are_started_all_at_once_when_healthy() -> None:
    """A queue at 1 of 3 starts two at once."""
    assert decide.queue_actions(queue(3), [child(1)], NOW, idle) == [Start("q"), Start("q")]


def test_a_backing_off_queue_starts_nothing_before_its_time_then_one_at_a_time() -> None:
    """After a death at start: nothing until next_start_at, then a single start even if three are missing."""
    q = queue(3)
    q.policy.died_at_start(NOW)
    assert decide.queue_actions(q, [], NOW, idle) == []
    assert decide.queue_actions(q, [], NOW + defaults.RESTART_BACKOFF_MIN_S, idle) == [Start("q")]


def test_scale_down_stops_idle_children_first_then_the_newest() -> None:
    """Of four children for a target of two, the busy ones stay; among the idle the newest go."""
    a, b, c, d = child(1, started_at=1), child(2, started_at=2), child(3, started_at=3), child(4, started_at=4)
    busy = {a.pid, d.pid}
    actions = decide.queue_actions(queue(2), [a, b, c, d], NOW, lambda ch: ch.pid in busy)
    assert actions == [StopChild(c, StopReason.SCALE_DOWN), StopChild(b, StopReason.SCALE_DOWN)]


def test_stopping_children_do_not_count_toward_the_target() -> None:
    """A child being recycled that runs no message is replaced at once: the queue stays at its target."""
    assert decide.queue_actions(queue(1), [child(1, stop=StopReason.RECYCLE)], NOW, idle) == [Start("q")]


@pytest.mark.parametrize("reason", [StopReason.SCALE_DOWN, StopReason.RECYCLE, StopReason.DECLARED_DEAD])
def test_a_stopping_child_still_running_its_message_holds_its_place_until_it_exits(reason: StopReason) -> None:
    """Target 3, two running, one stopped but busy: no start, so that no more than 3 handlers ever run."""
    finishing = child(3, stop=reason)
    mine = [child(1), child(2), finishing]
    assert decide.queue_actions(queue(3), mine, NOW, lambda c: c is finishing) == []
    assert decide.queue_actions(queue(3), mine, NOW, idle) == [Start("q")]
    assert decide.queue_actions(queue(4), mine, NOW, lambda c: True) == [Start("q")]


def test_a_queue_at_its_target_does_nothing() -> None:
    """Two running current children for a target of two: no action."""
    assert decide.queue_actions(queue(2), [child(1), child(2)], NOW, idle) == []


# --- rolling, draining, FATAL -------------------------------------------------------------


def test_a_roll_first_starts_one_new_child() -> None:
    """Old generation everywhere: one new child, nothing stopped yet."""
    assert decide.queue_actions(queue(2), [child(1, generation="old"), child(2, generation="old")],
                                NOW, idle) == [Start("q")]


def test_a_roll_waits_while_the_new_child_starts() -> None:
    """No old child is stopped before the new one is ready."""
    mine = [child(1, generation="old"), child(2, generation="old"), child(3, State.STARTING)]
    assert decide.queue_actions(queue(2), mine, NOW, idle) == []


def test_a_roll_stops_the_oldest_old_child_once_the_new_one_is_ready() -> None:
    """Ready new child: stop the old child started first."""
    old1, old2 = child(1, generation="old", started_at=5), child(2, generation="old", started_at=1)
    actions = decide.queue_actions(queue(2), [old1, old2, child(3)], NOW, idle)
    assert actions == [StopChild(old2, StopReason.ROLL)]


def test_a_roll_waits_for_the_old_child_it_stopped_to_exit() -> None:
    """Never target + 2 processes: while a rolled-out child finishes its message nothing starts."""
    mine = [child(1, generation="old", stop=StopReason.ROLL), child(2, generation="old"), child(3)]
    assert decide.queue_actions(queue(2), mine, NOW, idle) == []


def test_a_removed_queue_drains_every_live_child() -> None:
    """Queue removed by SIGHUP: each live child is stopped, the ones already stopping are left alone."""
    a, b = child(1), child(2, stop=StopReason.RECYCLE)
    q = queue(0, removed=True)
    assert decide.queue_actions(q, [a, b], NOW, idle) == [StopChild(a, StopReason.DRAIN)]


def test_a_fatal_queue_starts_and_stops_nothing() -> None:
    """FATAL: the children still running keep running, no new one starts."""
    q = queue(3)
    q.policy.give_up("handler cannot be imported")
    assert decide.queue_actions(q, [child(1)], NOW, idle) == []


def test_the_backoff_is_forgotten_once_a_current_child_ran_long_enough() -> None:
    """Ready for RESTART_BACKOFF_RESET_S: healthy again; a starting or old child does not count."""
    reset = defaults.RESTART_BACKOFF_RESET_S
    assert decide.ran_long_enough([child(1, started_at=NOW - reset)], "new", NOW)
    assert not decide.ran_long_enough([child(1, started_at=NOW - reset + 1)], "new", NOW)
    assert not decide.ran_long_enough([child(1, State.STARTING, started_at=0)], "new", NOW)
    assert not decide.ran_long_enough([child(1, generation="old", started_at=0)], "new", NOW)


# --- deaths ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stop, killed_by_us, costs", [
    (None, False, True),
    (StopReason.TIMEOUT, False, True),
    (StopReason.TIMEOUT, True, True),
    (StopReason.SCALE_DOWN, False, True),
    (StopReason.SCALE_DOWN, True, False),
    (StopReason.SHUTDOWN, True, False),
])
def test_only_a_stop_we_asked_for_and_ended_is_free(stop: StopReason | None, killed_by_us: bool,
                                                     costs: bool) -> None:
    """Unplanned deaths and timeouts cost an attempt; a stop we asked for costs nothing when our SIGKILL ended it."""
    c = child(1, stop=stop)
    if c.stop is not None:
        c.stop.killed_by_us = killed_by_us
    assert decide.costs_attempt(c) is costs


@pytest.mark.parametrize("status, slot, held, uptime, expected", [
    (exited(0), view(ready=True), 0, 0.1, Death.CLEAN),
    (exited(0), view(ready=False), 0, 0.1, Death.AT_START),
    (exited(EXIT_IMPORT), view(ready=False), 0, 0.1, Death.CANNOT_RUN),
    (exited(EXIT_IMPORT), view(ready=True, busy=True), 1, 0.1, Death.WORKING),
    (exited(EXIT_IMPORT), view(ready=True), 0, 0.1, Death.AT_START),
    (exited(EXIT_IMPORT), view(ready=True), 0, defaults.MIN_UPTIME_S, Death.WORKING),
    (killed(signal.SIGKILL), view(ready=True), 0, 0.1, Death.AT_START),
    (killed(signal.SIGKILL), view(ready=True, received=1), 0, 0.1, Death.WORKING),
    (killed(signal.SIGKILL), view(ready=True, busy=True), 0, 0.1, Death.WORKING),
    (killed(signal.SIGKILL), view(ready=False), 1, 0.1, Death.WORKING),
    (killed(signal.SIGKILL), view(ready=False), None, 0.1, Death.AT_START),
    (exited(1), view(ready=True), 0, defaults.MIN_UPTIME_S, Death.WORKING),
    (exited(1), view(ready=False), 0, 100.0, Death.AT_START),
])
def test_a_death_is_classified_by_status_slot_and_what_its_list_held(
        status: int, slot: SlotView, held: int | None, uptime: float, expected: Death) -> None:
    """Clean after ready, handler import failure (exit 3 before ready only), working (took a message or
    had settled), or at start."""
    assert decide.death(status, slot, held, uptime) is expected


def test_the_web_child_is_fatal_on_bad_settings_and_backs_off_only_when_it_dies_young() -> None:
    """Exit 2: bad web settings; otherwise a death within MIN_UPTIME_S is at start."""
    assert decide.web_death(exited(decide.WEB_EXIT_CONFIG), 100.0) is Death.CANNOT_RUN
    assert decide.web_death(killed(signal.SIGKILL), 0.1) is Death.AT_START
    assert decide.web_death(killed(signal.SIGKILL), defaults.MIN_UPTIME_S) is Death.WORKING


# --- deadlines and readiness -------------------------------------------------------------------


def test_overdue_are_the_stops_past_their_deadline_that_still_have_one() -> None:
    """A SIGKILL already sent (kill_at None) is not sent again."""
    due, later, sent = child(1, stop=StopReason.SHUTDOWN), child(2, stop=StopReason.SHUTDOWN), child(3)
    assert due.stop is not None and later.stop is not None
    due.stop.kill_at, later.stop.kill_at = NOW, NOW + 1
    sent.state, sent.stop = State.STOPPING, Stop(StopReason.TIMEOUT, None)
    assert decide.overdue([due, later, sent, child(4)], NOW) == [due]


def test_over_time_needs_a_limit_and_a_message_in_hand() -> None:
    """message_timeout 0 is no limit; an idle child is never over time."""
    assert decide.over_time(busy_since_us=1, now_us=2_000_002, message_timeout_s=2)
    assert not decide.over_time(busy_since_us=1, now_us=2_000_001, message_timeout_s=2)
    assert not decide.over_time(busy_since_us=0, now_us=10**12, message_timeout_s=2)
    assert not decide.over_time(busy_since_us=1, now_us=10**12, message_timeout_s=0)


def test_converged_means_every_live_queue_at_target_ready_and_current() -> None:
    """A starting, old or stopping child, or a removed queue still draining, is not converged; FATAL is skipped."""
    q = {"q": queue(2)}
    assert decide.converged(q, [child(1), child(2)])
    assert not decide.converged(q, [child(1), child(2, State.STARTING)])
    assert not decide.converged(q, [child(1), child(2, generation="old")])
    assert not decide.converged(q, [child(1), child(2, stop=StopReason.RECYCLE)])
    assert not decide.converged({"q": queue(0, removed=True)}, [child(1, stop=StopReason.DRAIN)])
    fatal = queue(2)
    fatal.policy.give_up("handler cannot be imported")
    assert decide.converged({"q": fatal}, [])
    assert decide.status_line({"q": fatal, "r": queue(1)}, []) == (
        "consumers ready: q FATAL (handler cannot be imported), r 0/1")
