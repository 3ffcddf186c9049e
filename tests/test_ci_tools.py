"""A machine without chromium or faketime: plain pytest skips those tests
saying why; under .ci/run ($SMQSUP_TEST_REQUIRE_TOOLS=1) they fail instead."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import procs

PROBE = '''
from tests.helpers import missing_tool

def test_needs_a_tool():
    missing_tool("frobnicator not found: apt-get install frobnicator")
'''


@pytest.mark.parametrize("strict, outcome", [("", "1 skipped"), ("1", "1 failed")])
def test_a_missing_tool_skips_with_its_reason_unless_ci_requires_it(tmp_path: Path, strict: str,
                                                                    outcome: str) -> None:
    """missing_tool() skips (reason shown) on a fresh machine and fails under CI."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = procs.env(SMQSUP_TEST_REQUIRE_TOOLS=strict)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(probe)],
                       capture_output=True, text=True, env=env, cwd=procs.REPO, timeout=60)
    assert outcome in r.stdout, r.stdout
    assert "frobnicator not found: apt-get install frobnicator" in r.stdout
