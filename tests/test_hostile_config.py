"""Hostile queues.yaml files: whatever a file holds, loading it fails in one line and a
running supervisor survives it on SIGHUP, keeping its consumers."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

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
