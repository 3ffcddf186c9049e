"""Running the real ``smqsup`` command in subprocesses for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import yaml

REPO = Path(__file__).resolve().parent.parent


def write_config(path: Path, url: Optional[str], queues: dict[str, dict[str, Any]], **top: Any) -> Path:
    """Write a queues.yaml; ``url`` None means the embedded server."""
    doc: dict[str, Any] = dict(top)
    if url is not None:
        doc.setdefault("redis", {})["url"] = url
    doc["queues"] = queues
    path.write_text(yaml.safe_dump(doc))
    return path


def env(out_dir: Optional[Path] = None, **extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), e.get("PYTHONPATH", "")]))
    if out_dir is not None:
        e["SMQ_TEST_OUT"] = str(out_dir)
    e.update(extra)
    return e


def smqsup(*args: str, out_dir: Optional[Path] = None, **popen: Any) -> "subprocess.Popen[str]":
    """Start ``smqsup ARGS`` (as ``python -m smqsup``) with stderr captured to a pipe."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "smqsup", *args], env=popen.pop("env", env(out_dir)),
                            text=True, **popen)


def run(*args: str, timeout: float = 60, **kw: Any) -> "subprocess.CompletedProcess[str]":
    """Run ``smqsup ARGS`` to completion."""
    return subprocess.run([sys.executable, "-m", "smqsup", *args], env=kw.pop("env", env()),
                          capture_output=True, text=True, timeout=timeout, **kw)


def stop(proc: "subprocess.Popen[str]", timeout: float = 15) -> int:
    """SIGTERM a process we started and wait for it; SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()
