"""smqsup.testing: the testing kit, a pytest plugin (entry point ``smqsup``,
in pytest11) whose fixtures run a queue's handler in the test's own process
through the real scripts, on a private redis-server. Off unless a test asks
for a fixture; importing it imports neither redis nor a handler.

- plugin.py: the fixtures (smqsup_redis_url, smqsup_namespace, smqsup_config,
  smqsup_producer, smqsup_worker) and the ini option ``smqsup_config``.
- worker.py: Worker (``drain(queue, move_time=...)``) and Handled, what became of a message.

    def test_orders(smqsup_producer, smqsup_worker):
        smqsup_producer.publish("orders", {"id": 7})
        [handled] = smqsup_worker.drain("orders")
        assert handled.state == "acked"
"""

from __future__ import annotations

from typing import Any

from smqsup.testing.plugin import (
    pytest_addoption,
    smqsup_config,
    smqsup_namespace,
    smqsup_producer,
    smqsup_redis_url,
    smqsup_worker,
)

__all__ = ["Handled", "Worker", "pytest_addoption", "smqsup_config", "smqsup_namespace", "smqsup_producer",
           "smqsup_redis_url", "smqsup_worker"]


def __getattr__(name: str) -> Any:
    # Lazy: the plugin loads in every pytest run of a project with smqsup installed.
    if name in ("Worker", "Handled"):
        from smqsup.testing import worker

        return getattr(worker, name)
    raise AttributeError(name)
