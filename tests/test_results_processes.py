"""Tracked messages under a real supervisor: a consumer SIGKILLed mid-message
and the result that the redelivery gives; the queue option from queues.yaml."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from smqsup import MessageFailed
from smqsup.client.producer import Producer
from tests import procs
from tests.handlers import read_events
from tests.helpers import wait_for
from tests.procs import NotifySocket

pytestmark = pytest.mark.topologies


def test_after_a_sigkill_mid_message_the_result_is_the_redeliverys(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """The child running a tracked message is SIGKILLed: result() waits through the reclaim and returns
    what the second attempt (another process) returned; the state said active, then done."""
    supervise({"q": {"handler": "tests.handlers:answer", "consumers": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"hang": True}, result_ttl=60)
        [start] = wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "start"])
        wait_for(lambda: p.state("q", mid) == "active")
        os.kill(start["pid"], signal.SIGKILL)
        got = p.result("q", mid, timeout=20)
        assert got["attempts"] == 1 and got["pid"] != start["pid"]
        assert p.state("q", mid) == "done"


def test_result_ttl_in_queues_yaml_tracks_every_publish(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str) -> None:
    """``result_ttl: 1m`` on a queue: a plain publish from any producer is tracked; a Reject raises MessageFailed."""
    supervise({"q": {"handler": "tests.handlers:answer", "result_ttl": "1m"},
               "r": {"handler": "tests.handlers:reject", "result_ttl": "1m"}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        wait_for(lambda: p._broker.queues.result_ttl("q") == 60 and p._broker.queues.result_ttl("r") == 60)
        mid = p.publish("q", "hello")
        assert p.result("q", mid, timeout=20)["body"] == "hello"
        rid = p.publish("r", "x")
        with pytest.raises(MessageFailed) as failed:
            p.result("r", rid, timeout=20)
        assert failed.value.reason.startswith("rejected")
