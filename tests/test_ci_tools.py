"""The test tooling: a machine without chromium or faketime (plain pytest skips those tests
saying why; under .ci/run ($SMQSUP_TEST_REQUIRE_TOOLS=1) they fail instead), and the
report of which Lua scripts the cluster runs covered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import procs

PROBE = '''
from tests.support.helpers import missing_tool

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


def test_the_script_coverage_report_names_a_script_no_cluster_ran(tmp_path: Path) -> None:
    """Records of every script but ``take``: the report says take NEVER RAN and exits 1; with take
    recorded by another worker too, it exits 0."""
    from tests.support import script_coverage

    shas = {name: sha for sha, name in script_coverage.NAMES.items()}
    (tmp_path / "cluster-1.jsonl").write_text(json.dumps(sorted(set(shas.values()) - {shas["take"]})) + "\n[]\n")

    def report() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tests.support.script_coverage", str(tmp_path)], capture_output=True,
                              text=True, cwd=procs.REPO, timeout=60)
    r = report()
    assert r.returncode == 1 and "take                 NEVER RAN" in r.stdout, r.stdout + r.stderr
    assert f"{len(shas) - 1} of {len(shas)} scripts" in r.stdout and r.stdout.count("NEVER RAN") == 1
    (tmp_path / "cluster-2.jsonl").write_text(json.dumps([shas["take"]]) + "\n")
    assert report().returncode == 0


@pytest.mark.parametrize("args", [[], ["/nonexistent/dir"], ["a", "b"]])
def test_the_script_coverage_report_without_its_directory_says_how_to_call_it(args: list[str]) -> None:
    """No directory, a missing one, two: one usage line, exit 1, no traceback."""
    r = subprocess.run([sys.executable, "-m", "tests.support.script_coverage", *args], capture_output=True, text=True,
                       cwd=procs.REPO, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("usage: python -m tests.support.script_coverage DIR"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout
