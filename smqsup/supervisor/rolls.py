"""Rolls, parent side: what each consumer reported of its handler's code,
whether that code changed on disk, and a roll's beginning, failure and end.

    child ─▶ reports.py: <pid>.json (its handler's files, or why the import failed)
    SIGHUP ─▶ changed_code(children) ─▶ begin(q) ─▶ decide._roll, one child at a time
    a new child dies at start ─▶ death_in_roll ─▶ fail(q): the old children keep running
    no child of another generation left ─▶ finished(q) ─▶ ended(q): watched ROLL_WATCH_S more
    a new child dies while watched (a crash loop past the probation) ─▶ death_in_roll ─▶ fail(q)

A roll gives its queue a new generation: the base (plan.generation, the
config's hash) and the count of rolls begun, so that a roll the config did
not ask for still tells new children from old ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from smqsup import defaults, safe
from smqsup.supervisor.states import Child, QueueState, State


def error_line(report: Optional[dict[str, Any]]) -> Optional[str]:
    """The one line a child's report gives for its failed import, if any."""
    line = report.get("error") if report else None
    if not isinstance(line, str):
        return None
    line = " ".join(safe.scrub(line).split())
    return line if len(line) <= 300 else line[:297] + "..."


def changed_code(children: Iterable[Child]) -> Optional[str]:
    """The first file of a live child's handler code that changed on disk
    since it imported it; each distinct snapshot looked at once (children of
    one generation share theirs: Consumers keeps one of each)."""
    seen: set[int] = set()
    for c in children:
        if c.live and c.sources is not None and id(c.sources) not in seen:
            seen.add(id(c.sources))
            path = c.sources.changed()
            if path is not None:
                return path
    return None


def begin(q: QueueState, base: str, now: float) -> None:
    """Start a roll of ``q`` toward a new generation of config ``base`` (a
    roll already running goes on toward it: one roll, never two at once)."""
    q.rolls += 1
    q.generation = f"{base}.{q.rolls}"
    if q.rolling_since is None:
        q.rolling_since = q.roll_began = now
    q.roll_deaths, q.roll_failed, q.roll_next = 0, None, None
    q.policy.reset()  # the fix may be what this roll brings


def fail(q: QueueState, why: str) -> None:
    """The roll stops where it is: the children still running keep running;
    their replacements, if they die, start from the code on disk."""
    q.rolling_since, q.roll_failed, q.roll_next = None, why, None
    q.policy.reset()


def watched(q: QueueState, c: Child, now: float) -> bool:
    """Whether the death of ``c`` counts against the last roll: it was forked
    since the roll began, and the roll runs or ended ROLL_WATCH_S ago at most."""
    return q.roll_began is not None and c.started_at >= q.roll_began and (q.rolling or now < q.watch_until)


def ended(q: QueueState, now: float) -> None:
    """The roll replaced every old child: its new ones stay watched ROLL_WATCH_S."""
    q.rolling_since, q.watch_until = None, now + defaults.ROLL_WATCH_S


def death_in_roll(q: QueueState, c: Child, cannot_import: bool, at_start: bool, now: float) -> Optional[str]:
    """Why a watched death of a new child fails the roll, or None: at once
    when it cannot import the handler, after ROLL_START_FAILURES watched
    deaths otherwise (at start, or just past the probation: a crash loop)."""
    # Any child forked since the roll began imported the new code, whatever
    # generation it was started for.
    if not watched(q, c, now):
        return None
    q.roll_deaths += 1
    if cannot_import:
        return "the new code cannot be imported"
    if q.roll_deaths < defaults.ROLL_START_FAILURES:
        return None
    if at_start and q.rolling:
        return f"{q.roll_deaths} new consumers died at start"
    return f"{q.roll_deaths} new consumers died within {defaults.ROLL_WATCH_S:g}s of the roll"


def not_ready(q: QueueState, mine: Iterable[Child], now: float) -> Optional[Child]:
    """A child of the running roll still starting ROLL_READY_TIMEOUT_S after its fork, if any."""
    if q.rolling_since is None:
        return None
    return next((c for c in mine if c.state is State.STARTING and c.started_at >= q.rolling_since
                 and now - c.started_at > defaults.ROLL_READY_TIMEOUT_S), None)


def finished(q: QueueState, mine: Iterable[Child]) -> bool:
    """A running roll has no child of another generation left, stopping ones included."""
    return q.rolling and all(c.generation == q.generation for c in mine)
