"""The AsyncProducer's depends_on, chain and batches (the Producer's, on a
thread: client/aio_flows.py), on one Redis and on the Redis Cluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from smqsup import AsyncProducer
from smqsup.errors import MessageError
from tests.support.helpers import wait_for
from tests.support.inproc import Running
from tests.test_async_results import run

pytestmark = pytest.mark.topologies


def test_depends_on_and_chain_from_asyncio(start: Callable[..., Running], redis_url: str) -> None:
    """An awaited child runs after its awaited parent with its result; an awaited chain passes results along."""
    start(lambda m: (sum(m.parents.values()) if m.parents else 0) + m.body, name="a")

    async def work(p: AsyncProducer) -> tuple[Any, Any]:
        parent = await p.publish("a", 1, result_ttl=60)
        child = await p.publish("a", 10, depends_on=[("a", parent)], result_ttl=60)
        ids = await p.chain([("a", 1), ("a", 2), ("a", 3, {"result_ttl": 60})])
        return await p.result("a", child, timeout=10), await p.result("a", ids[-1], timeout=10)
    assert run(redis_url, work) == (11, 6)


def test_a_batch_from_asyncio(start: Callable[..., Running], redis_url: str) -> None:
    """async with producer.batch(...): its messages, awaited; its callback once they ended; its status."""
    seen: list[Any] = []
    start(lambda m: seen.append(m.body), name="w")
    start(lambda m: seen.append(m.body), name="done")

    async def work(p: AsyncProducer) -> str:
        unopened = p.batch(on_complete=("done", "x"))
        with pytest.raises(MessageError, match="not opened"):
            await unopened.publish("w", 0)
        async with p.batch(on_complete=("done", "fin")) as batch:
            await batch.publish("w", 1)
            await batch.publish_many("w", [2, 3])
        return batch.id
    batch_id = run(redis_url, work)
    wait_for(lambda: any(isinstance(b, dict) and b.get("batch") == batch_id for b in seen), timeout_s=10)

    async def status(p: AsyncProducer) -> Any:
        return await p.batch_status(batch_id)
    got = run(redis_url, status)
    assert got is not None and (got.total, got.done, got.fired) == (3, 3, True)
