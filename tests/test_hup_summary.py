"""The SIGHUP line: one summary of what a reload does, after the queues'
own lines, with a real supervisor: never "no changes" when handler code
rolls."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.mark.timeout(90)
def test_a_sighup_that_rolls_changed_code_says_so_in_one_summary_line(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, tmp_path: Path) -> None:
    """Two queues whose handler module changed on disk: the SIGHUP's one summary line names both as
    rolling, and no line says "no changes"; a SIGHUP with nothing changed says "no changes"."""
    code = tmp_path / "code"
    code.mkdir()
    _write(code / "hup_h.py", "def handle(msg):\n    return 1\n")
    env = {"PYTHONPATH": os.pathsep.join([str(code), str(procs.REPO)]), "PYTHONDONTWRITEBYTECODE": "1"}
    sup = supervise({"a": {"handler": "hup_h:handle"}, "b": {"handler": "hup_h:handle"}}, notify, extra_env=env)
    notify.wait("READY=1")
    wait_for(lambda: len(sup.consumers_by_queue()) == 2, timeout_s=30)
    _write(code / "hup_h.py", "def handle(msg):\n    return 2\n")
    sup.signal(signal.SIGHUP)
    wait_for(lambda: sup.log().count("rolled in") == 2, timeout_s=60)
    said = re.findall(r"INFO \[\d+\] smqsup\.supervisor\.arbiter: (SIGHUP: .*)", sup.log())
    assert said == ["SIGHUP: handler code rolling: a, b"], said
    sup.signal(signal.SIGHUP)
    wait_for(lambda: "SIGHUP: no changes" in sup.log(), timeout_s=30)
