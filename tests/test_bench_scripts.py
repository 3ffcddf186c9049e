"""The benchmarks under tests/bench/ are not run by the suite (each takes minutes), but each must start:
``--help`` of every one exits 0, so a rename in the package cannot leave one that no longer imports
(two did: ``smqsup.options`` and ``smqsup.stats`` had moved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("[a-z]*.py"))


def test_the_benchmarks_are_found() -> None:
    assert len(SCRIPTS) >= 20 and "throughput.py" in SCRIPTS, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_starts(script: str) -> None:
    """``python tests/bench/SCRIPT --help``: exit status 0 and a usage line."""
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                          timeout=60, cwd=BENCH.parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
