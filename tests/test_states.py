"""The children's state machine and the restart policy, over their transitions (no fork, no Redis)."""

from __future__ import annotations

import itertools

import pytest

from smqsup import defaults
from smqsup.supervisor.states import (
    POLICY_MOVES,
    PROCESS_MOVES,
    Child,
    IllegalMove,
    RestartPolicy,
    State,
    StopReason,
    allowed_move,
)

MIN, MAX = defaults.RESTART_BACKOFF_MIN_S, defaults.RESTART_BACKOFF_MAX_S


def child(state: State = State.STARTING) -> Child:
    return Child(pid=100, queue="q", index=1, consumer_id="h:100:abc", generation="g", slot=0, started_at=0.0,
                 state=state)


def test_a_process_goes_starting_running_stopping_exited() -> None:
    """The life of a consumer that is ready, then asked to stop, then reaped."""
    c = child()
    c.move(State.RUNNING)
    c.stopping_for(StopReason.SCALE_DOWN, 12.5)
    assert (c.state, c.stop_reason, c.stopping, c.live) == (State.STOPPING, StopReason.SCALE_DOWN, True, False)
    assert c.stop is not None and c.stop.kill_at == 12.5 and not c.stop.killed_by_us
    c.move(State.EXITED)
    assert c.state is State.EXITED


@pytest.mark.parametrize("old, new", [
    (old, new) for old, new in itertools.product(PROCESS_MOVES, State) if new not in PROCESS_MOVES[old]])
def test_every_process_move_outside_the_table_is_refused(old: State, new: State) -> None:
    """EXITED is final, STOPPING only ends, nothing goes back to STARTING, a process never backs off."""
    c = child(old)
    with pytest.raises(IllegalMove, match=f"{old.value} -> {new.value}"):
        c.move(new)
    assert c.state is old


def test_every_living_state_may_die_and_only_starting_or_running_may_be_stopped() -> None:
    """A death can come at any time; a stop is asked of a live process only once."""
    assert all(State.EXITED in PROCESS_MOVES[s] for s in (State.STARTING, State.RUNNING, State.STOPPING))
    assert {s for s, moves in PROCESS_MOVES.items() if State.STOPPING in moves} == {State.STARTING, State.RUNNING}
    with pytest.raises(IllegalMove):
        child(State.STOPPING).stopping_for(StopReason.SHUTDOWN, None)


def test_deaths_at_start_double_the_backoff_up_to_its_cap_then_go_fatal() -> None:
    """0.5, 1, 2, ... 30 s; the tenth death in a row makes the policy FATAL with a reason."""
    p = RestartPolicy()
    delays = []
    for n in range(1, defaults.RESTART_LIMIT + 1):
        delays.append(p.died_at_start(now=100.0))
        assert p.failures == n
        assert p.state is (State.FATAL if n == defaults.RESTART_LIMIT else State.BACKOFF)
    assert delays == [min(MIN * 2 ** i, MAX) for i in range(defaults.RESTART_LIMIT)]
    assert p.fatal == f"consumers keep dying at start ({defaults.RESTART_LIMIT} in a row)"
    assert not p.may_start(now=1e9)


def test_backoff_waits_then_allows_one_start_at_a_time() -> None:
    """While backing off nothing starts before next_start_at, and then one start at a time."""
    p = RestartPolicy()
    assert p.may_start(0.0) and not p.one_at_a_time
    p.died_at_start(now=10.0)
    assert not p.may_start(10.0 + MIN - 0.01)
    assert p.may_start(10.0 + MIN) and p.one_at_a_time


def test_a_death_after_work_began_allows_a_start_at_once_but_keeps_the_failures() -> None:
    """A poison message costs the queue an attempt, never a backoff; the count of failures stays."""
    p = RestartPolicy()
    p.died_at_start(now=10.0)
    p.died_working(now=10.1)
    assert p.may_start(10.1) and p.failures == 1 and p.state is State.BACKOFF


def test_a_stable_run_forgets_the_failures_and_resets_the_backoff() -> None:
    """After RESTART_BACKOFF_RESET_S of a ready child the policy is RUNNING with the shortest backoff."""
    p = RestartPolicy()
    for _ in range(3):
        p.died_at_start(now=0.0)
    p.stable()
    assert (p.state, p.failures, p.backoff_s) == (State.RUNNING, 0, MIN)
    assert p.died_at_start(now=0.0) == MIN


def test_fatal_is_left_only_by_a_reset_and_keeps_its_first_reason() -> None:
    """Siblings dying after the import failure change nothing; SIGHUP's reset starts afresh."""
    p = RestartPolicy()
    p.give_up("handler cannot be imported")
    p.died_at_start(now=0.0)
    p.give_up("something else")
    p.stable()
    assert (p.state, p.fatal, p.failures) == (State.FATAL, "handler cannot be imported", 1)
    p.reset()
    assert (p.state, p.fatal, p.failures, p.next_start_at, p.backoff_s) == (State.RUNNING, None, 0, 0.0, MIN)


def test_a_policy_without_limit_never_goes_fatal_by_count() -> None:
    """The web UI's policy backs off for ever rather than give up."""
    p = RestartPolicy(limit=None)
    for _ in range(50):
        p.died_at_start(now=0.0)
    assert p.state is State.BACKOFF and p.backoff_s == MAX


@pytest.mark.parametrize("old, new", [
    (old, new) for old, new in itertools.product(POLICY_MOVES, State) if new not in POLICY_MOVES[old]])
def test_every_policy_move_outside_the_table_is_refused(old: State, new: State) -> None:
    """A policy is RUNNING, BACKOFF or FATAL, and FATAL only goes back to RUNNING."""
    with pytest.raises(IllegalMove):
        allowed_move(POLICY_MOVES, old, new)
