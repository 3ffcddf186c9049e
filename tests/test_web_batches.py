"""GET /api/batches and the page's Open batches panel: every queue's open
batches with their counts, hostile values shown as text."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests import test_web_events
from tests.test_browser import XSS, _count, _wait
from tests.test_web_events import WebFactory
from tests.test_web_hostile import check_log, strict_json

pytestmark = pytest.mark.topologies

#: The fixtures of the web tests: a server per call, and the headless Chromium.
web = test_web_events.web
browser = test_web_events.browser


def _get(server: Any, query: str = "") -> dict[str, Any]:
    status, _, body = server.request("GET", "/api/batches" + query)
    assert status == 200, (status, body)
    return dict(strict_json(body))


def test_open_batches_are_listed_with_their_counts_until_they_fire(redis_url: str, web: WebFactory) -> None:
    """Two open batches on two queues, one closed and fired: the listing has the open two, with counts."""
    with Producer(redis_url) as p:
        a = p.batch(on_complete=("done", 1))
        a.publish_many("w", [1, 2, 3])
        b = p.batch(on_success=("other", 2))
        with p.batch(on_complete=("done", 3)) as fired:
            pass
        server = web()
        rows = {r["batch"]: r for r in _get(server)["batches"]}
    assert set(rows) == {a.id, b.id} and fired.id not in rows
    assert (rows[a.id]["home"], rows[a.id]["total"], rows[a.id]["pending"], rows[a.id]["closed"]) == ("done", 3, 3,
                                                                                                     False)
    assert rows[b.id]["home"] == "other"
    for bad in ("?limit=0", "?limit=-1", "?limit=NaN", "?limit=" + "9" * 50, "?limit=1001"):
        status, _, _ = server.request("GET", "/api/batches" + bad)
        assert status == 400, bad
    check_log(server)


def test_the_page_lists_open_batches_as_text(browser: Any, redis_url: str, redis_client: "redis.Redis[Any]",
                                             web: WebFactory) -> None:
    """The Open batches panel shows an open batch; a hostile field in Redis is text, never HTML."""
    with Producer(redis_url) as p:
        batch = p.batch(on_complete=("done", 1))
        batch.publish("w", 1)
    redis_client.sadd("smq:queues", "done")
    redis_client.hset(QueueKeys("smq", "done").batch(batch.batch_id), "done", XSS)
    server = web()
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.goto(f"{server.url}/")
    _wait(page, "() => document.querySelectorAll('[data-testid=batch-row]').length === 1", "the open batch")
    assert page.eval_on_selector_all("[data-testid=batch-row]", "rs => rs.map(r => r.dataset.batch)") == [batch.id]
    assert _count(page, "[data-testid=batches-table] img") == 0 and page.evaluate("window.__xss") is None
    assert problems == []
    page.close()
