"""The example handlers tested with smqsup's testing kit (README "Testing
your handlers"): each test publishes, then drains the queue in its own
process, through the real scripts, on a private redis-server."""

from __future__ import annotations

from typing import Any

import pytest

from smqsup import Producer
from smqsup.testing import Worker


def test_an_order_is_acked(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """An order with an id: handled once, acked."""
    smqsup_producer.publish("orders", {"id": 1, "item": "widget", "qty": 2})
    [handled] = smqsup_worker.drain("orders")
    assert handled.state == "acked" and handled.attempts == 1 and handled.body["id"] == 1


def test_an_order_without_an_id_is_dead_lettered_at_once(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """Reject: dead-lettered on its first attempt, no retry, with the handler's reason."""
    smqsup_producer.publish("orders", {"item": "no id"})
    [handled] = smqsup_worker.drain("orders")
    assert handled.state == "dead" and handled.attempts == 1
    assert "order without an id" in handled.reason


def test_emails_are_sent_by_the_async_handler(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """An async def handler runs as well (in the test's thread, on a loop of its own)."""
    smqsup_producer.publish_many("emails", [{"to": f"u{n}@example.com"} for n in range(3)])
    handled = smqsup_worker.drain("emails")
    assert [h.state for h in handled] == ["acked"] * 3


def test_a_flaky_job_is_retried_once_time_moves(smqsup_producer: Producer, smqsup_worker: Worker,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream fails twice, then answers: without moving time the job waits for its retry; moving
    time forward (retry_delay 500ms, backoff 2) it is retried twice and acked on its third attempt."""
    rolls = iter([0.2, 0.2, 0.9])  # flaky(): below 1/3 raises ConnectionError
    monkeypatch.setattr("examples.handlers.random.random", lambda: next(rolls))
    smqsup_producer.publish("flaky", {"job": 1})
    [waiting] = smqsup_worker.drain("flaky")
    assert waiting.state == "retried" and isinstance(waiting.error, ConnectionError)
    [handled] = smqsup_worker.drain("flaky", move_time=True)
    assert handled.state == "acked" and handled.attempts == 3


def test_a_job_failing_every_time_ends_dead_after_its_retries(smqsup_producer: Producer, smqsup_worker: Worker,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """retry_threshold 2: three attempts, then the dead letters, with the last error as the reason."""
    def always(*_: Any) -> float:
        return 0.2
    monkeypatch.setattr("examples.handlers.random.random", always)
    smqsup_producer.publish("flaky", {"job": 2})
    [handled] = smqsup_worker.drain("flaky", move_time=True)
    assert handled.state == "dead" and handled.attempts == 3
    assert handled.reason.startswith("ConnectionError: upstream timed out")
