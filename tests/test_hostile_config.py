"""Hostile queues.yaml files: whatever a file holds, loading it fails in one line and a
running supervisor survives it on SIGHUP, keeping its consumers."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from smqsup import config
from smqsup.supervisor import arbiter as arbiter_mod
from smqsup.supervisor.arbiter import Arbiter
from smqsup.supervisor.protocol import MAX_SLOTS
from tests import procs
from tests.helpers import wait_for
from tests.procs import NotifySocket

REJECTED = "SIGHUP: new config rejected, keeping the old one"
DEEP_LISTS = "[" * 5000 + "]" * 5000 + "\n"
DEEP_MAPPINGS = "{a: " * 5000 + "1" + "}" * 5000 + "\n"


def _rejected_lines(sup: procs.Supervisor) -> list[str]:
    return [line for line in sup.log().splitlines() if REJECTED in line]


def test_check_and_start_refuse_deep_nesting_in_one_line(tmp_path: Path) -> None:
    """`smqsup check` and `smqsup -c` on 5,000-deep YAML: exit 2, one line, no traceback."""
    path = tmp_path / "deep.yaml"
    for text in (DEEP_LISTS, DEEP_MAPPINGS):
        path.write_text(text)
        for args in (("check", "-c", str(path)), ("-c", str(path))):
            r = procs.run(*args, timeout=30)
            assert r.returncode == 2, r.stderr
            [line] = r.stderr.strip().splitlines()
            assert line.startswith(f"Error: {path}: invalid YAML at line 1:") and "nested deeper" in line


def test_sighup_with_deeply_nested_yaml_keeps_the_supervisor_and_its_consumers(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket) -> None:
    """Deep lists, then deep mappings on SIGHUP: one rejection line each, same consumer pids."""
    sup = supervise({"q": {"handler": "tests.handlers:record", "consumers": 2}}, notify)
    notify.wait("READY=1")
    before = {c.pid for c in sup.children()}
    for count, text in enumerate((DEEP_LISTS, DEEP_MAPPINGS), 1):
        sup.cfg.write_text(text)
        sup.signal(signal.SIGHUP)
        wait_for(lambda: len(_rejected_lines(sup)) == count or sup.proc.poll() is not None, timeout_s=15)
        assert sup.proc.poll() is None, sup.log()
        assert "nested deeper than 20 levels" in _rejected_lines(sup)[-1]
    assert {c.pid for c in sup.children()} == before


# --- the arbiter's handlers, on an Arbiter that never runs its loop -------------------


@pytest.fixture
def arbiter(tmp_path: Path, redis_url: str) -> Iterator[Arbiter]:
    """An Arbiter for two queues (a: 2, b: 1 consumers) whose loop is never started: nothing forks."""
    path = procs.write_config(tmp_path / "queues.yaml", redis_url,
                              {"a": {"handler": "tests.handlers:record", "consumers": 2},
                               "b": {"handler": "tests.handlers:record"}})
    arb = Arbiter(config.load(path), redis_url, None)
    yield arb
    arb.broker.close()
    os.close(arb._wake_r)
    os.close(arb._wake_w)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == arbiter_mod.__name__]


@pytest.mark.parametrize("broken", ["load", "plan"])
def test_an_unexpected_error_in_a_reload_is_one_line_and_keeps_the_old_config(
        arbiter: Arbiter, broken: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Not a ConfigError but a bug (here a RuntimeError with a newline) while loading or planning: one escaped line."""
    def boom(*args: object) -> None:
        raise RuntimeError("bug\nsecond line")

    monkeypatch.setattr(arbiter_mod.config_mod if broken == "load" else arbiter_mod, broken, boom)
    old = arbiter.cfg
    caplog.set_level(logging.INFO)
    arbiter.handle_hup()
    assert arbiter.cfg is old and {n: q.target for n, q in arbiter.queues.items()} == {"a": 2, "b": 1}
    assert _messages(caplog) == [
        "SIGHUP: new config rejected, keeping the old one: unexpected RuntimeError: bug\\nsecond line"]


def test_sigttin_stops_at_the_per_queue_and_total_bounds(
        arbiter: Arbiter, caplog: pytest.LogCaptureFixture) -> None:
    """SIGTTIN never raises a queue past 1000 consumers nor all queues past 1024; it says so."""
    caplog.set_level(logging.INFO)
    arbiter.queues["a"].target = config.CONSUMERS_PER_QUEUE_MAX
    arbiter.handle_ttin()
    assert (arbiter.queues["a"].target, arbiter.queues["b"].target) == (1000, 2)
    arbiter.handle_ttin()
    assert (arbiter.queues["a"].target, arbiter.queues["b"].target) == (1000, 3)
    arbiter.queues["b"].target = config.CONSUMERS_TOTAL_MAX - 1000
    caplog.clear()
    arbiter.handle_ttin()
    assert (arbiter.queues["a"].target, arbiter.queues["b"].target) == (1000, 24)
    assert _messages(caplog) == [
        "SIGTTIN: queue a stays at 1000 consumers (at most 1000 per queue, 1024 in all queues)",
        "SIGTTIN: queue b stays at 24 consumers (at most 1000 per queue, 1024 in all queues)"]


def test_a_full_slot_table_refuses_to_start_a_child_and_says_so_once(
        arbiter: Arbiter, caplog: pytest.LogCaptureFixture) -> None:
    """When every child slot is taken, reconcile starts nothing, raises nothing, and logs one line."""
    taken = 0
    with pytest.raises(IndexError):
        while True:
            arbiter.slots.allocate()
            taken += 1
    assert taken == MAX_SLOTS
    caplog.set_level(logging.INFO)
    for _ in range(3):
        arbiter.reconcile()
    assert arbiter.children == {}
    assert _messages(caplog) == [
        f"queue a: not starting a consumer: all {MAX_SLOTS} child slots are in use (children still stopping?); "
        "starting it once one is free"]


def test_a_failing_fork_refuses_to_start_a_child_and_says_so_once(
        arbiter: Arbiter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """fork() failing (a process limit) starts nothing, raises nothing, logs once and gives the slot back."""
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    caplog.set_level(logging.INFO)
    for _ in range(3):
        arbiter.reconcile()
    assert arbiter.children == {}
    assert _messages(caplog) == [
        "queue a: not starting a consumer: fork failed (Resource temporarily unavailable); trying again each tick"]
    taken = 0
    with pytest.raises(IndexError):
        while True:
            arbiter.slots.allocate()
            taken += 1
    assert taken == MAX_SLOTS
