"""The benchmarks under tests/bench/ are not run by the suite (each takes minutes), but each must start:
``--help`` of every one exits 0, so a rename in the package cannot leave one that no longer imports
(two did: ``smqsup.options`` and ``smqsup.stats`` had moved); tests/bench/README.md names each one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("[a-z]*.py"))


def test_the_benchmarks_are_found_and_each_has_its_line_in_the_benchmarks_readme() -> None:
    """tests/bench/README.md names every benchmark (and every helper module), so it cannot go stale."""
    assert len(SCRIPTS) >= 20 and "throughput.py" in SCRIPTS, SCRIPTS
    text = (BENCH / "README.md").read_text()
    unnamed = [p.name for p in sorted(BENCH.glob("*.py")) if f"`{p.name}`" not in text]
    assert unnamed == [], "tests/bench/README.md: no line for these"


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_starts(script: str) -> None:
    """``python tests/bench/SCRIPT --help``: exit status 0 and a usage line."""
    done = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                          timeout=60, cwd=BENCH.parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
