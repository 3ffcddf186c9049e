"""Autoscaling with real supervisors: a burst scales an autoscaled queue up
to its max within seconds and back to its min once idle; two supervisors
scale one queue together; SIGTTIN, SIGTTOU and SIGHUP keep to min and max;
nothing is lost or handled twice."""

from __future__ import annotations

import collections
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from smqsup.client.producer import Producer
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

Supervise = Callable[..., procs.Supervisor]
#: The burst's scale_down_after, s: its way back to min takes this, then a cooldown (1 s) a step.
DOWN_AFTER_S = 2


def _count(sup: procs.Supervisor) -> int:
    return len(sup.consumers_by_queue().get("q", ()))


def _queue(low: int, high: int, **scale: Any) -> dict[str, dict[str, Any]]:
    return {"q": {"handler": "tests.support.handlers:slow", "consumers": {"min": low, "max": high}, **scale}}


def _each_once(sups: list[procs.Supervisor], published: list[str]) -> None:
    done = [e["id"] for s in sups for e in s.events("done")]
    assert collections.Counter(done) == collections.Counter(published)


def test_a_burst_scales_up_to_max_within_10s_and_back_to_min_after_idle(
        supervise: Supervise, notify: NotifySocket, redis_url: str) -> None:
    """5,000 messages of 20 ms, {min: 1, max: 8}: 8 consumers within 10 s, drained once each, 1 again after idle
    (scale_down_after 2s: the bound on the way back is relative to it)."""
    sup = supervise(_queue(1, 8, scale_down_after=f"{DOWN_AFTER_S}s"), notify)
    notify.wait("READY=1")
    wait_for(lambda: _count(sup) == 1)
    with Producer(redis_url) as p:
        start = time.monotonic()
        published = p.publish_many("q", [{"sleep": 0.02, "n": n} for n in range(5000)])
    wait_for(lambda: _count(sup) == 8, timeout_s=10 - (time.monotonic() - start), interval_s=0.05,
             message=f"not 8 consumers within 10 s: {_count(sup)}")
    wait_for(lambda: len(sup.events("done")) >= 5000, timeout_s=60)
    drained = time.monotonic()
    wait_for(lambda: _count(sup) == 1, timeout_s=DOWN_AFTER_S + 10 - (time.monotonic() - drained), interval_s=0.1,
             message=f"not back to 1 within scale_down_after + 10 s: {_count(sup)}")
    _each_once([sup], published)
    log = sup.log()
    assert log.count("scaled up") == 7 and log.count("scaled down") == 7
    wait_for(lambda: "target 1 of 1..8 on " in procs.run("status", "-c", str(sup.cfg)).stdout, interval_s=0.2)
    [info] = json.loads(procs.run("status", "-c", str(sup.cfg), "--json").stdout)["queues"]["q"]["supervisors"]
    assert (info["scaled"]["from"], info["scaled"]["to"], info["autoscaled"]) == (2, 1, True)
    assert "idle for" in info["scaled"]["why"]
    assert "(lag " in log or "per consumer >" in log
    assert "died" not in log and "killed" not in log


def test_two_supervisors_scale_one_queue_together_and_lose_nothing(
        supervise: Supervise, redis_url: str) -> None:
    """Two supervisors, {min: 1, max: 4} each: a burst scales both up, each message runs once, both go back to 1."""
    sups = [supervise(_queue(1, 4, scale_down_after="3s"), name=f"s{i}") for i in (1, 2)]
    for s in sups:
        wait_for(lambda s=s: _count(s) == 1)
    peaks = [1, 1]
    with Producer(redis_url) as p:
        published = p.publish_many("q", [{"sleep": 0.02, "n": n} for n in range(3000)])

    def drained() -> bool:
        for i, s in enumerate(sups):
            peaks[i] = max(peaks[i], _count(s))
        return sum(len(s.events("done")) for s in sups) >= 3000

    wait_for(drained, timeout_s=60, interval_s=0.05)
    assert peaks[0] > 1 and peaks[1] > 1, peaks
    for s in sups:
        wait_for(lambda s=s: _count(s) == 1, timeout_s=3 + 10)
    _each_once(sups, published)


def test_signals_and_reloads_keep_an_autoscaled_queue_within_min_and_max(
        supervise: Supervise, notify: NotifySocket, redis_url: str, tmp_path: Path) -> None:
    """{min: 2, max: 3}: SIGTTIN stops at 3, SIGTTOU at 2; a reload to {min: 1, max: 2} keeps 2, to {4, 6} makes 4."""
    scale = {"scale_down_after": "1h"}
    sup = supervise(_queue(2, 3, **scale), notify)
    notify.wait("READY=1")
    wait_for(lambda: _count(sup) == 2)
    # One signal at a time: two of a kind sent at once may arrive as one.
    sup.signal(signal.SIGTTIN)
    wait_for(lambda: "SIGTTIN: queue q scaled to 3" in sup.log())
    sup.signal(signal.SIGTTIN)
    wait_for(lambda: "SIGTTIN: queue q stays at 3 consumers (at most its max 3, 1024 in all queues)" in sup.log())
    wait_for(lambda: _count(sup) == 3)
    sup.signal(signal.SIGTTOU)
    wait_for(lambda: "SIGTTOU: queue q scaled to 2" in sup.log())
    sup.signal(signal.SIGTTOU)
    wait_for(lambda: "SIGTTOU: queue q stays at 2 consumer(s) (at least 2)" in sup.log())
    wait_for(lambda: _count(sup) == 2)
    for low, high, expected in ((1, 2, 2), (4, 6, 4), (1, 8, 4)):
        procs.write_config(sup.cfg, redis_url, _queue(low, high, **scale))
        mark = len(notify.poll())
        sup.signal(signal.SIGHUP)
        notify.wait(f"STATUS=consumers ready: q {expected}/{expected}", mark)
        wait_for(lambda expected=expected: _count(sup) == expected)
    assert "roll" not in sup.log().split("SIGHUP", 1)[1]  # a range is no reason to roll
