"""The supervisor's bounds, with the real ``smqsup -c FILE`` and real signals:
what an exit status means once a consumer is ready, and ``max`` as a bound
on the handlers of an autoscaled queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests import procs
from tests.handlers import read_events
from tests.helpers import wait_for
from tests.procs import NotifySocket

Q = QueueKeys("smq", "q")


def _events(out_dir: Path, event: str) -> list[dict[str, Any]]:
    return [e for e in read_events(str(out_dir)) if e["event"] == event]


def test_exit_status_3_while_handling_a_message_is_an_ordinary_death_not_an_import_failure(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """Exit 3 after ready restarts the consumer at once: the queue keeps its consumers, poison dead-letters."""
    from smqsup.deadletter import DeadLetter

    sup = supervise({"q": {"handler": "tests.handlers:exit3", "consumers": 2, "retry_threshold": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        p.publish("q", "poison")
        p.publish("q", "poison")
    wait_for(lambda: redis_client.llen(Q.dead) == 2, timeout_s=30,
             message=f"not both dead-lettered; log:\n{sup.log()}")
    assert sorted(e["attempts"] for e in _events(out_dir, "start")) == [0, 0, 1, 1]
    assert {DeadLetter(raw).reason for raw in redis_client.lrange(Q.dead, 0, -1)} == {"exited with status 3"}
    wait_for(lambda: len(sup.children()) == 2, message=f"consumers not back; log:\n{sup.log()}")
    with Producer(redis_url) as p:
        mid = p.publish("q", "fine")
    wait_for(lambda: [e["id"] for e in _events(out_dir, "done")] == [mid])
    assert "FATAL" not in sup.log() and "cannot be imported" not in sup.log()
