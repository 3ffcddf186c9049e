"""The web UI in a real headless Chromium, against a running supervisor and producer, on one
redis-server and on a Redis Cluster."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from smqsup.client.producer import Producer
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import missing_tool, wait_for
from tests.support.webserver import WebServer

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
TOKEN = "browser-token"
XSS = '<img src=x onerror="window.__xss=1">'
#: Longest a page condition may take, in s (generous: the machine may be busy).
WAIT_S = 30

pytestmark = pytest.mark.topologies


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium (Debian's package) driven by Playwright; skipped with
    the reason when missing (failed under CI, which installs it)."""
    if not os.path.exists(CHROMIUM):
        missing_tool(f"{CHROMIUM} not found: apt-get install chromium (the browser test needs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_tool("playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _count(page: Any, selector: str) -> int:
    return int(page.locator(selector).count())


def _wait(page: Any, predicate: str, what: str) -> None:
    """Wait until the JavaScript function ``predicate`` returns true in the page, or
    fail naming ``what`` with the page's connection state and snapshot count."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(predicate, timeout=WAIT_S * 1000)
    except PlaywrightTimeout:
        state = page.evaluate("() => [document.getElementById('conn').textContent, document.body.dataset.snapshots,"
                              " document.getElementById('banner').textContent]")
        raise AssertionError(f"{what}: not seen within {WAIT_S} s (connection, snapshots, banner: {state})") from None


def test_page_shows_live_charts_consumers_and_dead_letters_safely(
        browser: Any, supervise: Callable[..., procs.Supervisor], redis_url: str, out_dir: Path,
        tmp_path: Path) -> None:
    """Live counters and charts move, consumers show CPU/memory, Requeue works, a hostile body stays text."""
    supervise({"work": {"handler": "tests.support.handlers:record", "consumers": 2},
               "bad": {"handler": "tests.support.web_handlers:fail_first", "retry_threshold": 0}})
    server = WebServer("--url", redis_url, "--listen", "127.0.0.1:0", "--token", TOKEN, log_dir=tmp_path)
    problems: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on("console", lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None)
        with Producer(redis_url) as producer:
            xss_id = producer.publish("bad", XSS)
            again_id = producer.publish("bad", {"requeue": "me"})
            producer.publish_many("work", [{"n": i} for i in range(10)])

            page.goto(f"{server.url}/?token={TOKEN}")
            assert page.url == f"{server.url}/"  # the cookie replaced the token in the address
            _wait(page, "() => document.body.dataset.snapshots >= 1", "a first snapshot")

            # Consumers table: 2 + 1 consumers, each with CPU and memory.
            _wait(page, """() => {
                const rows = [...document.querySelectorAll('[data-testid=consumer-row]')];
                return rows.length === 3 && rows.every(r => Number(r.dataset.rss) > 0 && r.dataset.cpu !== undefined);
            }""", "3 consumer rows with CPU and memory")
            cpu = page.locator("[data-testid=consumer-row] [data-testid=cpu]").all_inner_texts()
            rss = page.locator("[data-testid=consumer-row] [data-testid=rss]").all_inner_texts()
            assert all(float(c) >= 0 for c in cpu) and all(r.endswith(" MiB") and float(r[:-4]) > 1 for r in rss)
            assert _count(page, "[data-testid=consumer-row][data-queue=work]") == 2
            # Messages in flight of the most at once: concurrency 1 each, so 2 for 'work'.
            flights = page.locator("[data-testid=consumer-row] [data-testid=in-flight]").all_inner_texts()
            assert len(flights) == 3 and all(re.fullmatch(r"[01]/1", f) for f in flights), flights
            work = page.inner_text("[data-testid=queue-row][data-queue=work] [data-testid=in-flight]")
            assert re.fullmatch(r"[0-2]/2", work), work

            # Counters and charts follow what is published while the page is open.
            acked = int(page.get_attribute("[data-testid=total-acked]", "data-value"))
            chart_t = int(page.get_attribute("[data-testid=chart-total-rates]", "data-last-t"))
            snapshots = int(page.get_attribute("body", "data-snapshots"))
            producer.publish_many("work", [{"n": i} for i in range(20)])
            _wait(page, f"() => Number(document.querySelector('[data-testid=total-acked]').dataset.value) "
                        f">= {acked + 20}", "the acked total growing by 20")
            _wait(page, f"() => Number(document.querySelector('[data-testid=chart-total-rates]').dataset.lastT) "
                        f"> {chart_t}", "a newer point in the rates chart")
            assert int(page.get_attribute("body", "data-snapshots")) > snapshots
            rates = json.loads(page.get_attribute("[data-testid=chart-total-rates]", "data-last"))
            assert set(rates) == {"published", "acked", "retried", "dead-lettered"}
            assert page.inner_text("[data-testid=leader]")  # each queue names its collector

            # Dead letters: the hostile body is shown as text and never runs.
            bad = "[data-testid=dead-queue][data-queue=bad]"
            _wait(page, f"() => document.querySelectorAll('{bad} [data-testid=dead-row]').length === 2",
                  "2 dead letters of 'bad' listed")
            body = page.locator(f"{bad} [data-testid=dead-row][data-id='{xss_id}'] [data-testid=dead-body]")
            assert body.inner_text() == XSS
            assert _count(page, "[data-testid=dead-letters] img") == 0
            assert page.evaluate("window.__xss") is None

            # Requeue one: it leaves the list and its handler acks it on the second delivery.
            page.click(f"{bad} [data-testid=dead-row][data-id='{again_id}'] [data-testid=requeue]")
            _wait(page, f"() => !document.querySelector(\"[data-testid=dead-row][data-id='{again_id}']\")",
                  "the requeued dead letter leaving the list")
            assert "Requeued 1 dead letter(s) of bad" in page.inner_text("[data-testid=toast]")
            wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "done" and e["id"] == again_id],
                     WAIT_S, message="the requeued message was not handled again")
            _wait(page, f"() => document.querySelectorAll('{bad} [data-testid=dead-row]').length === 1",
                  "1 dead letter of 'bad' left")
            assert page.evaluate("window.__xss") is None

            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "web.png"), full_page=True)
        page.close()
        assert problems == []
    finally:
        assert server.stop() == 0, server.log()


def test_pause_button_and_message_browser(browser: Any, redis_url: str, redis_client: Any, tmp_path: Path) -> None:
    """Pause marks the queue paused (Redis flag set); the browser lists a scheduled message as text and removes it."""
    with Producer(redis_url) as producer:
        later = producer.publish("later", XSS, delay=3600)
        producer.publish("later", {"n": 1})
    server = WebServer("--url", redis_url, "--listen", "127.0.0.1:0", log_dir=tmp_path)
    problems: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.on("console", lambda msg: problems.append(f"console: {msg.text}") if msg.type == "error" else None)
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{server.url}/")
        row = "[data-testid=queue-row][data-queue=later]"
        _wait(page, f"() => document.querySelector('{row} [data-testid=pause]')", "the Pause button of 'later'")

        page.click(f"{row} [data-testid=pause]")
        _wait(page, f"() => document.querySelector('{row}').dataset.paused === 'true' && "
                    f"document.querySelector('{row} [data-testid=paused]')", "the queue row marked paused")
        assert redis_client.exists("smq:{later}:paused") == 1
        assert page.inner_text(f"{row} [data-testid=pause]") == "Resume"
        assert page.is_visible("[data-testid=browse-paused]")  # 'later' is the browser's only, chosen, queue

        page.click("[data-testid=browse-tab][data-state=scheduled]")
        item = f"[data-testid=browse-row][data-id='{later}']"
        _wait(page, f"() => document.querySelector(\"{item}\")", "the scheduled message in the browser")
        assert page.inner_text(f"{item} [data-testid=browse-body]") == XSS
        assert re.search(r"\(in (59|60) min\)$", page.inner_text(f"{item} [data-testid=due]"))
        assert _count(page, "[data-testid=browse-table] img") == 0 and page.evaluate("window.__xss") is None

        page.click(f"{item} [data-testid=browse-remove]")
        _wait(page, f"() => !document.querySelector(\"{item}\")", "the removed message leaving the list")
        assert f"Removed message {later} of later" in page.inner_text("[data-testid=toast]")
        assert redis_client.zcard("smq:{later}:scheduled") == 0

        page.click(f"{row} [data-testid=pause]")
        _wait(page, f"() => document.querySelector('{row}').dataset.paused === 'false'", "the queue row resumed")
        assert redis_client.exists("smq:{later}:paused") == 0
        page.close()
        assert problems == []
    finally:
        assert server.stop() == 0, server.log()


def test_schedules_table_shows_last_and_next_fire_and_states(browser: Any, redis_url: str, redis_client: Any,
                                                              tmp_path: Path) -> None:
    """A stored schedule's row: its period, last and next fire; a paused one says so; a definition that
    cannot be used is 'unusable', its reason (hostile text) shown as text in the tooltip."""
    from smqsup.config.schedule import ScheduleConfig
    from smqsup.store.broker import Broker

    broker = Broker(redis_url)
    broker.schedules.upsert(ScheduleConfig("tick", "q", every_ms=60_000), "sup:1:aa", 600_000)
    broker.schedules.upsert(ScheduleConfig("night", "q", cron="0 3 * * *", timezone="Europe/Berlin"),
                            "sup:1:aa", 600_000)
    broker.schedules.pause("q", "night", "test")
    redis_client.hset("smq:{q}:schedules", "bad", XSS)
    server = WebServer("--url", redis_url, "--listen", "127.0.0.1:0", log_dir=tmp_path)
    problems: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.goto(f"{server.url}/")
        _wait(page, "() => document.querySelectorAll('[data-testid=schedule-row]').length === 3", "three schedules")
        tick = "[data-testid=schedule-row][data-name=tick]"
        assert "every 1m" in page.inner_text(tick) and page.inner_text(f"{tick} [data-testid=schedule-state]") == "active"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:00", page.inner_text(f"{tick} [data-testid=next-fire]"))
        assert page.inner_text(f"{tick} [data-testid=last-fire]") == "–"
        assert page.inner_text("[data-name=night] [data-testid=schedule-state]") == "paused"
        bad = page.locator("[data-name=bad] [data-testid=schedule-state]")
        assert bad.inner_text() == "unusable" and "not JSON" in (bad.get_attribute("title") or "")
        assert _count(page, "[data-testid=schedules-table] img") == 0 and page.evaluate("window.__xss") is None
        assert not problems, problems
    finally:
        assert server.stop() == 0, server.log()


def test_queue_card_lists_the_busiest_groups_as_text(browser: Any, redis_url: str, tmp_path: Path) -> None:
    """A queue with message groups: its card lists the busiest, most waiting first, with waiting and running
    counts; a hostile group name stays text."""
    hostile = "<img src=x onerror=window.__xss=1>"
    with Producer(redis_url) as producer:
        producer.publish_many("tenants", list(range(5)), group=hostile)
        producer.publish_many("tenants", list(range(2)), group="small")
    server = WebServer("--url", redis_url, "--listen", "127.0.0.1:0", log_dir=tmp_path)
    problems: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.goto(f"{server.url}/")
        box = "[data-testid=queue-groups][data-queue=tenants]"
        _wait(page, f"() => document.querySelectorAll('{box} [data-testid=group-row]').length === 2",
              "the busiest groups of 'tenants'")
        rows = page.locator(f"{box} [data-testid=group-row]").all_inner_texts()
        assert [r.split("\t") for r in rows] == [[hostile, "5", "0"], ["small", "2", "0"]], rows
        assert "2 with messages waiting" in page.inner_text(f"{box} h4")
        assert _count(page, f"{box} img") == 0 and page.evaluate("window.__xss") is None
        page.close()
        assert problems == []
    finally:
        assert server.stop() == 0, server.log()


def test_queue_row_shows_outbox_entries_set_aside_and_group_keys_of_the_wrong_type(
        browser: Any, redis_url: str, redis_client: Any, tmp_path: Path) -> None:
    """A queue with outbox entries set aside and a group key of the wrong type: its row has a badge for each,
    the reasons (the key named, hostile text kept as text) in their titles."""
    from smqsup.keys import QueueKeys, queues_set
    from smqsup.store import scripts
    hostile = "<img src=x onerror=window.__xss=1>"
    a = QueueKeys("smq", "a")
    redis_client.sadd(queues_set("smq"), "a")
    reason = f"WRONGTYPE smq:{{b}}:blocked holds a string, not a hash: nothing done {hostile}"
    scripts.outbox_park(a, [("o\tb", reason, "cid", [b"o\tb\tcid\tpid\tdone\tnull"])], base_ms=1000, most_ms=30000,
                        park_after=1).run(redis_client)
    redis_client.set(a.groups[2], "junk")
    server = WebServer("--url", redis_url, "--listen", "127.0.0.1:0", log_dir=tmp_path)
    problems: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        page.goto(f"{server.url}/")
        row = "[data-testid=queue-row][data-queue=a]"
        _wait(page, f"() => document.querySelector('{row} [data-testid=outbox-parked]') !== null",
              "the outbox badge of queue 'a'")
        parked = page.locator(f"{row} [data-testid=outbox-parked]")
        assert parked.inner_text() == "outbox: 1 set aside"
        assert parked.get_attribute("title") == f"child of b (1 failures): {reason}"
        wrong = page.locator(f"{row} [data-testid=wrong-type-keys]")
        assert wrong.get_attribute("title") == f"{a.groups[2]} holds a string, not a hash"
        assert _count(page, f"{row} img") == 0 and page.evaluate("window.__xss") is None
        page.close()
        assert problems == []
    finally:
        assert server.stop() == 0, server.log()
