"""The shipped config/: queues.yaml loads, and smqsup.service is a valid, complete unit."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from smqsup.config.model import load
from tests.support import procs
from tests.support.procs import REPO

CONFIG = Path(__file__).parent.parent / "config"
UNIT = CONFIG / "smqsup.service"

REQUIRED = {
    "Service": {
        "Type": "notify",
        "NotifyAccess": "main",
        "ExecStart": "/usr/local/bin/smqsup -c /etc/smqsup/queues.yaml",
        "ExecReload": "/bin/kill -HUP $MAINPID",
        "KillMode": "mixed",
        "KillSignal": "SIGTERM",
        "TimeoutStopSec": "60",
        "Restart": "always",
        "RestartSec": "2",
        "WatchdogSec": "30",
        "User": "smqsup",
        "Group": "smqsup",
        "StateDirectory": "smqsup",
        "WorkingDirectory": "/var/lib/smqsup",
        "Environment": "PYTHONUNBUFFERED=1",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectControlGroups": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "RestrictNamespaces": "yes",
        "LockPersonality": "yes",
        "SystemCallArchitectures": "native",
    },
    "Install": {"WantedBy": "multi-user.target"},
}

#: systemd-analyze complaints about the host, not the unit: the service user
#: does not exist on a build machine.
HOST_ONLY = re.compile(r"\b(user|group)\b.*\b(not found|does not exist|unknown|no such)\b", re.I)


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read(UNIT, encoding="utf-8")
    return parser


def test_queues_yaml_loads() -> None:
    """config/queues.yaml is a valid configuration naming the example handlers."""
    loaded = load(CONFIG / "queues.yaml")
    assert set(loaded.queues) == {"orders", "emails", "flaky", "reports"}
    assert {q.handler for q in loaded.queues.values()} == {
        "examples.handlers:process_order", "examples.handlers:send_email", "examples.handlers:flaky",
        "examples.handlers:report",
    }
    assert set(loaded.schedules) == {"stats", "nightly"}
    assert loaded.shutdown_timeout_s < int(REQUIRED["Service"]["TimeoutStopSec"])


def test_queues_yaml_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """REDIS_URL and STATE_DIRECTORY from the unit's environment reach the config."""
    monkeypatch.setenv("REDIS_URL", "redis://redis.internal:6380/2")
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/smqsup")
    loaded = load(CONFIG / "queues.yaml")
    assert loaded.redis.url == "redis://redis.internal:6380/2"
    assert loaded.redis.data_dir == Path("/var/lib/smqsup/redis")


def test_unit_has_the_required_settings() -> None:
    """Every required directive is present with its value."""
    parser = unit()
    for section, settings in REQUIRED.items():
        for key, value in settings.items():
            assert parser.get(section, key, fallback=None) == value, f"[{section}] {key}"


def test_unit_verifies(tmp_path: Path) -> None:
    """systemd-analyze verify reports nothing about the unit's own syntax or directives."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    binary = tmp_path / "smqsup"
    binary.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    binary.chmod(0o755)
    text = UNIT.read_text(encoding="utf-8")
    assert "ExecStart=/usr/local/bin/smqsup " in text
    copy = tmp_path / "smqsup.service"
    copy.write_text(text.replace("ExecStart=/usr/local/bin/smqsup ", f"ExecStart={binary} "),
                    encoding="utf-8")
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True,
                            timeout=60, check=False)
    # verify exits 0 even for unknown keys and unparsable values: its
    # diagnostics name the unit, so any line about it (but the host-only
    # ones) is a failure.
    output = (result.stderr + result.stdout).splitlines()
    problems = [line for line in output if "smqsup.service" in line and not HOST_ONLY.search(line)]
    assert problems == [], "\n".join(output)


def test_the_example_producer_without_a_supervisor_says_so_in_one_line(tmp_path: Path) -> None:
    """examples/producer.py with no supervisor running (the embedded server not started): one line saying
    to start `smqsup -c FILE` first, exit 2, no traceback."""
    cfg = tmp_path / "queues.yaml"
    cfg.write_text((REPO / "examples" / "queues.yaml").read_text().replace(".smqsup-data", str(tmp_path / "data")))
    done = subprocess.run([sys.executable, str(REPO / "examples" / "producer.py"), "-c", str(cfg)],
                          capture_output=True, text=True, timeout=60, env=procs.env())
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: "), done.stderr
    assert f"start `smqsup -c {cfg}` first" in done.stderr and "Traceback" not in done.stderr


def test_the_example_config_runs_the_dashboard() -> None:
    """examples/queues.yaml (the quick start's) runs the web UI on the loopback address the README names."""
    loaded = load(REPO / "examples" / "queues.yaml")
    assert loaded.web is not None and loaded.web.listen == "127.0.0.1:8087"
    assert "http://127.0.0.1:8087" in (REPO / "README.md").read_text().split("## What it does")[0]
