"""The pure parts of rolls and autoscaling: a roll's probation, failure and
end; the files a handler's import loaded and their changes; the children's
reports read without trusting them; one autoscaling step at a time."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from smqsup import defaults
from smqsup.config.model import QueueConfig
from smqsup.store.ops.control import RollRequest, _request
from smqsup.supervisor import decide, rolls
from smqsup.supervisor import reports as reports_mod
from smqsup.supervisor.decide import Start, StopChild
from smqsup.supervisor.scaling import Look, Pace, step
from smqsup.supervisor.states import Child, QueueState, State, StopReason
from smqsup.worker import sources
from smqsup.worker.sources import Sources

NOW = 1000.0


def queue(target: int = 2, generation: str = "g.1") -> QueueState:
    return QueueState(QueueConfig(name="q", handler="m:f", consumers=target), generation, target)


def child(pid: int, generation: str, started_at: float = 0.0, state: State = State.RUNNING) -> Child:
    return Child(pid, "q", pid, f"h:{pid}:x", generation, pid, started_at, state=state)


def busy(c: Child) -> bool:
    return False


# --- rolls ---------------------------------------------------------------------------------


def test_the_first_old_child_stops_only_once_a_new_one_has_run_its_probation() -> None:
    """A new child ready for less than MIN_UPTIME_S stops no old one; past it, the oldest old one stops."""
    q = queue(2)
    old = [child(1, "g", 0.0), child(2, "g", 1.0)]
    young = child(3, "g.1", NOW - defaults.MIN_UPTIME_S / 2)
    assert decide.queue_actions(q, [*old, young], NOW, busy) == []
    proven = dataclasses.replace(young, started_at=NOW - defaults.MIN_UPTIME_S)
    assert decide.queue_actions(q, [*old, proven], NOW, busy) == [StopChild(old[0], StopReason.ROLL)]


def test_a_failed_roll_keeps_both_generations_and_only_keeps_the_count() -> None:
    """After a failed roll nothing old is stopped; a missing child is started (from the code on disk)."""
    q = queue(3)
    rolls.begin(q, "g", NOW)
    rolls.fail(q, "the new code cannot be imported: boom")
    mine = [child(1, "g"), child(2, "g.1")]
    assert decide.queue_actions(q, mine, NOW, busy) == [Start("q")]
    assert decide.status_line({"q": q}, mine) == "consumers ready: q 2/3 (roll failed: the new code cannot be " \
                                                 "imported: boom)"


def test_a_roll_fails_at_once_on_an_import_error_and_after_three_deaths_at_start_otherwise() -> None:
    """death_in_roll: import failure now; deaths at start counted to ROLL_START_FAILURES; old children never count."""
    q = queue(2)
    rolls.begin(q, "base", NOW)
    assert q.generation == "base.1" and q.rolling
    assert rolls.death_in_roll(q, child(9, "g"), True, True, NOW + 1) is None  # an old child's death
    # A child forked for the old generation just before the roll began still imported the new code.
    assert rolls.death_in_roll(q, child(3, "g", NOW + 0.1), True, True, NOW + 1) == "the new code cannot be imported"
    rolls.begin(q, "base", NOW)
    deaths = [rolls.death_in_roll(q, child(n, q.generation, NOW + 1), False, True, NOW + 2) for n in range(3)]
    assert deaths == [None, None, f"{defaults.ROLL_START_FAILURES} new consumers died at start"]


def test_a_rolled_queue_is_watched_for_roll_watch_s_after_its_roll_ended() -> None:
    """Deaths past the probation of the roll's children, during it or ROLL_WATCH_S after: the third fails the roll."""
    q = queue(2)
    rolls.begin(q, "base", NOW)
    new = [child(n, q.generation, NOW + n) for n in range(1, 4)]
    assert rolls.death_in_roll(q, new[0], False, False, NOW + 3) is None  # during the roll
    rolls.ended(q, NOW + 5)
    assert not q.rolling and rolls.watched(q, new[1], NOW + 5 + defaults.ROLL_WATCH_S - 0.1)
    assert not rolls.watched(q, new[1], NOW + 5 + defaults.ROLL_WATCH_S)  # the watch is over
    assert not rolls.watched(q, child(9, "g", NOW - 1), NOW + 6)  # forked before the roll: not its child
    assert rolls.death_in_roll(q, new[1], False, False, NOW + 6) is None
    why = rolls.death_in_roll(q, new[2], False, True, NOW + 7)
    assert why == f"3 new consumers died within {defaults.ROLL_WATCH_S:g}s of the roll"
    rolls.begin(q, "base", NOW + 100)  # the next roll counts afresh
    assert q.roll_deaths == 0 and q.roll_began == NOW + 100


def test_a_roll_asked_during_a_roll_goes_on_toward_the_newest_generation_and_ends_once() -> None:
    """begin() twice: one roll (its start kept), a new generation; finished once no other generation is left."""
    q = queue(2)
    rolls.begin(q, "base", NOW)
    rolls.begin(q, "base", NOW + 5)
    assert q.rolling_since == NOW and q.generation == "base.2"
    assert not rolls.finished(q, [child(1, "base.1"), child(2, "base.2")])
    assert rolls.finished(q, [child(2, "base.2"), child(3, "base.2")])


# --- the handler's files --------------------------------------------------------------------


def test_changed_sees_a_new_size_a_new_mtime_and_a_file_gone(tmp_path: Path) -> None:
    """A snapshot's files: unchanged says None; a rewrite, a touch or a removal names the file."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("y = 1\n")
    snap = sources.snapshot([str(a), str(b)])
    assert snap.changed() is None
    st = os.stat(b)
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert snap.changed() == str(b)
    b.unlink()
    assert sources.snapshot([str(a), str(b)]).files == ((str(a), *_stat(a)),)
    assert snap.changed() == str(b)


def _stat(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


def test_the_standard_library_does_not_count_and_site_packages_do() -> None:
    """json's file is the stdlib's; an installed package's (yaml) and a project file count."""
    assert not sources.counted(json.__file__)
    import yaml

    assert sources.counted(yaml.__file__)
    assert sources.counted(__file__)


def test_loaded_since_lists_the_handler_module_first_then_what_its_import_loaded(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A module importing a helper module: both files, the handler's first; what was loaded before is not."""
    (tmp_path / "rh_helper.py").write_text("V = 1\n")
    (tmp_path / "rh_main.py").write_text("import rh_helper\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    __import__("rh_main")
    try:
        files = [path for path, _, _ in sources.loaded_since(before, "rh_main").files]
    finally:
        for name in ("rh_main", "rh_helper"):
            sys.modules.pop(name, None)
    assert files == [str(tmp_path / "rh_main.py"), str(tmp_path / "rh_helper.py")]


@pytest.mark.parametrize("report", [None, [], {"files": 5}, {"files": [["a", "x", 1]]}, {"files": [["a", 1]]},
                                    {"files": [[1, 2, 3, 4]]}, {"nofiles": []}, "text", {"files": [["a", None, 1]]}])
def test_a_report_that_is_not_a_list_of_files_gives_no_snapshot(report: Any) -> None:
    """Garbage in a child's report: None, never an exception."""
    assert Sources.from_report(report) is None


def test_a_snapshot_survives_its_json_round_trip(tmp_path: Path) -> None:
    """to_json then from_json gives the same files."""
    (tmp_path / "m.py").write_text("pass\n")
    snap = sources.snapshot([str(tmp_path / "m.py")])
    assert Sources.from_json(snap.to_json()) == snap
    assert Sources.from_json("\xff not json") is None


# --- reports --------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"not json", b"[1, 2]", b'"text"', b"\xff\xfe", b"{" * 100_000,
                                     b"[" * 100_000])
def test_a_report_file_that_is_not_a_json_object_is_read_as_none_and_removed(content: bytes) -> None:
    """Reports.take never trusts the file: anything but a JSON object is None, and the file goes."""
    reports = reports_mod.Reports()
    try:
        path = Path(reports.dir) / "123.json"
        path.write_bytes(content)
        assert reports.take(123) is None
        assert not path.exists()
        assert reports.take(124) is None  # none written
    finally:
        reports.close()
    assert not os.path.exists(reports.dir)


def test_a_report_that_is_a_fifo_or_a_link_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO at <pid>.json (nobody writing) and a symlink to a real report: None at once, both removed."""
    reports = reports_mod.Reports()
    try:
        os.mkfifo(Path(reports.dir) / "5.json")
        assert reports.take(5) is None
        (tmp_path / "real.json").write_text('{"files": []}')
        os.symlink(tmp_path / "real.json", Path(reports.dir) / "6.json")
        assert reports.take(6) is None
        assert os.listdir(reports.dir) == []
        old = reports.dir
        os.rmdir(reports.dir)
        reports.ensure()  # a /tmp cleaner removed it: a new one, never the old path again
        assert reports.dir != old and os.stat(reports.dir).st_mode & 0o777 == 0o700
    finally:
        reports.close()


def test_a_path_with_a_nul_counts_as_changed_and_never_raises() -> None:
    """A report naming "a\x00b": changed() names it, snapshot() leaves it out, counted() says no."""
    snap = Sources.from_report({"files": [["a\x00b", 1, 1]]})
    assert snap is not None and snap.changed() == "a\x00b"
    assert sources.snapshot(["a\x00b"]).files == () and not sources.counted("a\x00b")


def test_a_roll_whose_target_falls_below_its_old_children_stops_the_surplus_first() -> None:
    """4 old children, no new one, target lowered to 2 in the same reload: the oldest old ones stop, one at a time."""
    q = queue(2)
    old = [child(n, "g", float(n)) for n in range(1, 5)]
    assert decide.queue_actions(q, old, NOW, busy) == [StopChild(old[0], StopReason.ROLL)]


def test_a_roll_child_not_ready_in_time_is_named_by_not_ready() -> None:
    """not_ready: a child of the roll still STARTING past ROLL_READY_TIMEOUT_S; an older one or a ready one is not."""
    q = queue(2)
    rolls.begin(q, "base", NOW)
    late = child(7, q.generation, NOW + 1, State.STARTING)
    fine = child(8, q.generation, NOW + 1)
    t = NOW + 1 + defaults.ROLL_READY_TIMEOUT_S
    assert rolls.not_ready(q, [fine, late], t) is None
    assert rolls.not_ready(q, [fine, late], t + 1) is late
    rolls.fail(q, "x")
    assert rolls.not_ready(q, [late], t + 1) is None


def test_a_report_larger_than_its_bound_is_refused() -> None:
    """A report past CHILD_REPORT_MAX_BYTES is None (a handler importing the world, or garbage)."""
    reports = reports_mod.Reports()
    try:
        big = json.dumps({"error": "x" * defaults.CHILD_REPORT_MAX_BYTES})
        (Path(reports.dir) / "7.json").write_text(big)
        assert reports.take(7) is None
        assert os.stat(reports.dir).st_mode & 0o777 == 0o700
    finally:
        reports.close()


@pytest.mark.parametrize("report,line", [
    (None, None), ({"error": 5}, None), ({"error": "a\nb\tc"}, "a b c"), ({"error": "x" * 400}, "x" * 297 + "..."),
])
def test_an_import_error_from_a_report_is_one_short_line(report: Any, line: Any) -> None:
    """error_line: a string only, whitespace folded, at most 300 characters."""
    assert rolls.error_line(report) == line


_AT = 1_700_000_000_000


@pytest.mark.parametrize("raw,expected", [
    (b'{"token": "t", "queues": ["a", "b"], "at_ms": %d}' % _AT, RollRequest(("a", "b"))),
    (b'{"queues": null, "at_ms": %d}' % _AT, RollRequest(None)),
    (b"null", None), (b'{"queues": {"a": 1}, "at_ms": %d}' % _AT, None), (b'{"queues": [1], "at_ms": %d}' % _AT, None),
    (b"\xff", None), (b'{"queues": [' + b'"q",' * 20_000 + b'"q"], "at_ms": %d}' % _AT, None), (b"nan", None),
    (b"[" * 100_000, None), (b'{"queues": ' + b"[" * 100_000 + b"}", None),
    (b'{"queues": null}', None), (b'{"queues": null, "at_ms": true}', None), (b'{"queues": null, "at_ms": "1"}', None),
    (b'{"queues": null, "at_ms": %d}' % (_AT - 10_001), None), (b'{"queues": null, "at_ms": %d}' % (_AT + 1_001), None),
    (b'{"queues": null, "at_ms": %d}' % (_AT - 10_000), RollRequest(None)),
])
def test_a_roll_request_that_is_not_one_or_is_stale_is_left_out(raw: bytes, expected: Any) -> None:
    """What anyone may have written in the roll requests: a fresh request of names or of every queue, or nothing;
    undated, older than ROLL_REQUEST_FRESH_S or dated ahead by more than a second: nothing."""
    assert _request(raw, _AT) == expected


# --- autoscaling -----------------------------------------------------------------------------


def scaled(low: int = 1, high: int = 8, **kw: Any) -> QueueConfig:
    return QueueConfig(name="q", handler="m:f", consumers=low, consumers_max=high, **kw)


def test_lag_or_backlog_past_its_threshold_steps_up_once_per_cooldown_and_never_past_max() -> None:
    """Up on lag, up on backlog, not again within the cooldown, not past max."""
    q, pace = scaled(scale_up_lag_s=5.0, scale_up_backlog=20, scale_cooldown_s=1.0), Pace()
    assert step(q, 1, Look(1, 6.0, 1.0), pace, NOW) == (1, "lag 6.0s > 5s")
    pace.last_step_at = NOW
    assert step(q, 2, Look(100, 0.1, 2.0), pace, NOW + 0.5) == (0, "")
    assert step(q, 2, Look(100, 0.1, 2.0), pace, NOW + 1.0) == (1, "100 ready, 50 per consumer > 20")
    assert step(q, 8, Look(10_000, 60.0, 8.0), pace, NOW + 9) == (0, "")


def test_a_step_down_waits_for_scale_down_after_of_spare_capacity_then_one_per_cooldown() -> None:
    """Idle: nothing before scale_down_after; then down, again after the cooldown; never below min."""
    q, pace = scaled(2, 8, scale_down_after_s=60.0, scale_cooldown_s=1.0), Pace()
    idle = Look(0, 0.0, 0.0)
    assert step(q, 4, idle, pace, NOW) == (0, "")
    assert step(q, 4, idle, pace, NOW + 59) == (0, "")
    assert step(q, 4, idle, pace, NOW + 60)[0] == -1
    pace.last_step_at = NOW + 60
    assert step(q, 3, idle, pace, NOW + 60.5) == (0, "")
    assert step(q, 3, idle, pace, NOW + 61)[0] == -1
    assert step(q, 2, idle, pace, NOW + 100) == (0, "")


def test_a_busy_look_restarts_the_idle_clock_so_a_steady_load_does_not_flap() -> None:
    """Busy past what one consumer fewer could carry (SCALE_DOWN_BUSY) or anything ready: no step down."""
    q, pace = scaled(1, 8, scale_down_after_s=10.0), Pace()
    half_of_4 = Look(0, 0.0, 2.0)  # 2 of 4 busy: 3 consumers at 67 %, under SCALE_DOWN_BUSY
    assert step(q, 4, half_of_4, pace, NOW) == (0, "")
    assert step(q, 4, half_of_4, pace, NOW + 10)[0] == -1
    pace.last_step_at = NOW + 10
    # At 3, one fewer would be busy 100 %: the idle clock stops, and no lag means no step up either.
    for t in range(11, 200):
        assert step(q, 3, half_of_4, pace, NOW + t) == (0, "")
    assert step(q, 3, Look(3, 0.0, 0.0), pace, NOW + 300) == (0, "")  # something ready: not idle
    assert pace.idle_since is None


@pytest.mark.parametrize("limit", [{"rate_limit_per_s": 10.0}, {"group_concurrency": 1},
                                   {"group_rate_limit_per_s": 2.0}])
def test_a_rate_limited_queue_steps_up_only_while_its_handlers_are_busy_and_down_when_they_wait(
        limit: dict[str, Any]) -> None:
    """rate_limit, group limits: a backlog with handlers mostly idle (waiting for the limit) steps down, not up;
    busy, up."""
    q, pace = scaled(1, 4, scale_down_after_s=10.0, scale_cooldown_s=1.0, **limit), Pace()
    waiting = Look(100, 30.0, 0.5)  # 100 ready, 30 s of lag, 0.5 of 4 handlers busy: the limit holds them
    assert step(q, 4, waiting, pace, NOW) == (0, "")
    assert step(q, 4, waiting, pace, NOW + 10)[0] == -1
    pace.last_step_at = NOW + 10
    assert step(q, 1, Look(100, 30.0, 1.0), pace, NOW + 20) == (1, "lag 30.0s > 5s")
    unlimited = scaled(1, 4, scale_down_after_s=10.0)
    assert step(unlimited, 4, waiting, Pace(), NOW) == (0, "")  # at max: the lag holds it there
    assert step(unlimited, 2, waiting, Pace(), NOW) == (1, "lag 30.0s > 5s")
