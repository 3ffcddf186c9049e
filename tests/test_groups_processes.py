"""Message groups under real supervisors: the turns between groups,
group_concurrency across every consumer of every supervisor while consumers
are SIGKILLed, and group_rate_limit, with consumer processes recording what
their handlers saw.

The handlers are defined here (``tests.test_groups_processes:NAME``): the
consumers import this module, which records through tests.support.handlers."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import psutil
import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.handlers import _record
from tests.support.helpers import wait_for

K = QueueKeys("smq", "q")
#: The group state hash (includes/groups.lua): "s:G", "p:G"; and the running counts: G -> its messages in
#: consumers' lists.
GROUP_STATE, GROUP_RUNNING = K.groups[2], K.groups[5]


# -- handlers (run in the consumer processes) ---------------------------------


def started(msg: Any) -> None:
    """Record the start with the message's group; nothing else to do."""
    _record("start", msg, group=msg.group)


def sleepy(msg: Any) -> None:
    """Record the start, sleep body["sleep"] s, record the end; each with the group."""
    _record("start", msg, group=msg.group)
    time.sleep(float(msg.body["sleep"]))  # the handler's work: the span a group's slot is held
    _record("end", msg, group=msg.group)


# -- helpers of the test process ----------------------------------------------


def _acked(client: redis.Redis) -> int:
    return int(client.hget(K.counters, "acked") or 0)


def _group_state(client: redis.Redis) -> dict[str, str]:
    """The group state hash, as text."""
    return {_text(k): _text(v) for k, v in client.hgetall(GROUP_STATE).items()}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _running_fields(client: redis.Redis) -> dict[str, str]:
    """The groups' running counts: their messages still counted in consumers' lists."""
    return {_text(k): _text(v) for k, v in client.hgetall(GROUP_RUNNING).items()}


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    """Most of ``intervals`` (start, end) open at one moment; an end at the very time of a start comes first."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


# -- tests --------------------------------------------------------------------


def _a_before_own_last_small(starts: list[dict[str, Any]]) -> int:
    """The A messages the consumers took before the B..K ones, counted in each consumer's own start order
    (which is the order it took them in) up to its last B..K message, summed. Not by the wall clock across
    processes: a consumer the OS stops for 100 ms with its last B..K message in hand would count every A
    the other three started meanwhile (187 once, on a loaded 2-core CI machine), which is no turn of the
    store's round-robin."""
    mine: dict[int, list[dict[str, Any]]] = {}
    for e in sorted(starts, key=lambda e: e["t"]):
        mine.setdefault(e["pid"], []).append(e)
    total = 0
    for own in mine.values():
        small = [i for i, e in enumerate(own) if e["group"] != "A"]
        total += sum(1 for e in own[:small[-1]] if e["group"] == "A") if small else 0
    return total


@pytest.mark.timeout(120)
def test_a_backlog_of_ten_thousand_in_one_group_delays_ten_small_groups_by_a_few_turns(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """Group A has 10,000 waiting, then groups B..K publish 20 each; one supervisor starts with 4
    consumers: every B..K message starts before A's 1,000th does (round-robin: about one A per turn of
    the 11 groups), the handlers see each message's group, and all 10,200 are handled exactly once."""
    others = [chr(c) for c in range(ord("B"), ord("K") + 1)]
    group_of: dict[str, str] = {}
    with Producer(redis_url) as p:
        for chunk in range(10):
            for mid in p.publish_many("q", range(chunk * 1000, (chunk + 1) * 1000), group="A"):
                group_of[mid] = "A"
        for g in others:
            for mid in p.publish_many("q", range(20), group=g):
                group_of[mid] = g
    assert len(group_of) == 10_200
    sup = supervise({"q": {"handler": "tests.test_groups_processes:started", "consumers": 4}})
    began = time.monotonic()
    wait_for(lambda: _acked(redis_client) >= 10_200, timeout_s=60, interval_s=0.2,
             message=f"10,200 not handled within 60 s ({_acked(redis_client)} acked)")
    took = time.monotonic() - began

    starts = sup.events("start")
    counts = Counter(e["id"] for e in starts)
    assert set(counts) == set(group_of), (len(set(group_of) - set(counts)), "missing")
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:5]
    assert all(e["group"] == group_of[e["id"]] for e in starts)
    assert len({e["pid"] for e in starts}) == 4, "all four consumers took part"

    a_starts = sorted(e["t"] for e in starts if e["group"] == "A")
    a_1000th = a_starts[999]
    small = sorted((e["t"], e["group"], e["body"]) for e in starts if e["group"] != "A")
    late = [s for s in small if s[0] >= a_1000th]
    a_before_last_small = _a_before_own_last_small(starts)
    assert not late, (f"{len(late)} B..K messages started after A's 1,000th "
                      f"(A started {a_before_last_small} before the last of B..K); first late: {late[:3]}")
    # The bound of the design: one A per turn of the 11 groups, 20 turns (plus the 4 consumers' skew).
    assert a_before_last_small <= 40, a_before_last_small
    assert redis_client.llen(K.pending) == 0 and redis_client.zcard(K.groups[0]) == 0
    print(f"10,200 handled in {took:.1f} s; A started {a_before_last_small} before the last of B..K")


@pytest.mark.timeout(150)
def test_group_concurrency_holds_across_two_supervisors_while_consumers_are_sigkilled(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """group_concurrency 2, 2 supervisors x 2 consumers x 4 threads, 5,000 messages of 10-30 ms over 50
    groups, a random consumer (one that has taken a message) SIGKILLed every 300 ms: every message
    handled, never more than 2 of one group running at once (a killed handler runs until its kill), and
    once all are acked the groups' running counts (the running hash) are gone within the reclaim
    time."""
    rng = random.Random(42)
    queue = {"handler": "tests.test_groups_processes:sleepy", "consumers": 2, "concurrency": 4,
             "group_concurrency": 2, "retry_threshold": 1000}
    sups = [supervise({"q": queue}, name=name, heartbeat_timeout="3s") for name in ("s1", "s2")]
    for s in sups:
        procs.wait_registered(s, 2, redis_client)
    groups = [f"tenant-{n}" for n in range(50)]
    group_of: dict[str, str] = {}
    with Producer(redis_url) as p:
        for g in groups:
            bodies = [{"sleep": round(rng.uniform(0.01, 0.03), 4)} for _ in range(100)]
            for mid in p.publish_many("q", bodies, group=g):
                group_of[mid] = g
    assert len(group_of) == 5000

    kills: list[tuple[int, float]] = []  # (pid, monotonic time just after its SIGKILL)
    next_kill = time.monotonic() + 0.3

    def victims(s: procs.Supervisor) -> list[Any]:
        """Its consumers that took a message (their log exists): their death is a working one,
        never a death at start that would put the queue into backoff."""
        return [k for k in s.children() if os.path.exists(s.out_dir / f"{k.pid}.log")]

    def chaos_until_all_acked() -> bool:
        nonlocal next_kill
        if _acked(redis_client) >= 5000:
            return True
        if time.monotonic() >= next_kill:
            order = rng.sample(sups, 2)
            for s in order:
                found = victims(s)
                if found:
                    victim = rng.choice(found)
                    try:
                        victim.send_signal(signal.SIGKILL)
                    except psutil.NoSuchProcess:  # gone meanwhile: the next tick picks another
                        break
                    kills.append((victim.pid, time.monotonic()))
                    next_kill = time.monotonic() + 0.3
                    break
        return False

    began = time.monotonic()
    wait_for(chaos_until_all_acked, timeout_s=90, interval_s=0.02,
             message=f"5,000 not acked within 90 s ({_acked(redis_client)} acked, {len(kills)} kills)")
    took = time.monotonic() - began
    assert len(kills) >= 8, f"only {len(kills)} kills before all 5,000 were acked in {took:.1f} s"

    # (c) the slots: every one freed by a settle or by the reclaim of a killed consumer.
    wait_for(lambda: not _running_fields(redis_client), timeout_s=3 + 2,
             message=f"running counts left behind: {_running_fields(redis_client)}")
    left = _group_state(redis_client)
    assert not left, f"group state left behind with nothing ready or running: {left}"

    events = [e for s in sups for e in s.events()]
    # (a) every message handled (a handler that returned), some twice (a kill between its end and its ack).
    ended = {e["id"] for e in events if e["event"] == "end"}
    assert ended == set(group_of), (len(set(group_of) - ended), "never ended")
    assert all(e["group"] == group_of[e["id"]] for e in events)
    assert redis_client.llen(K.pending) == 0 and redis_client.llen(K.dead) == 0

    # (b) the most of one group running at once, from the handlers' own clock readings.
    killed_at = dict(kills)
    ends = {(e["pid"], e["id"], e["attempts"]): e["t"] for e in events if e["event"] == "end"}
    start_keys = Counter((e["pid"], e["id"], e["attempts"]) for e in events if e["event"] == "start")
    assert max(start_keys.values()) == 1, "one delivery recorded twice by one process"
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    cut = 0
    for e in events:
        if e["event"] != "start":
            continue
        key = (e["pid"], e["id"], e["attempts"])
        if key in ends:
            end = ends[key]
        else:
            assert e["pid"] in killed_at, f"a start with no end in a process never killed: {e}"
            assert e["t"] <= killed_at[e["pid"]], f"a start after its process was killed: {e}"
            end = killed_at[e["pid"]]
            cut += 1
        intervals[e["group"]].append((e["t"], end))
    most = {g: _most_at_once(iv) for g, iv in intervals.items()}
    over = {g: n for g, n in most.items() if n > 2}
    assert not over, f"group_concurrency 2 exceeded: {over}"
    assert max(most.values()) == 2, most  # the limit is reached, not merely respected
    assert cut >= 1, "no kill interrupted a handler: the kills tested nothing"
    print(f"5,000 acked in {took:.1f} s with {len(kills)} kills ({cut} handlers cut short), "
          f"{sum(1 for e in events if e['event'] == 'start') - 5000} extra deliveries")


@pytest.mark.timeout(60)
@pytest.mark.exclusive
def test_a_group_rate_limit_spaces_each_groups_starts_and_the_groups_go_side_by_side(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """group_rate_limit 5/s, 4 consumers, groups A and B of 10 each: each group's starts are at least
    200 ms apart (less the 20 ms the queue's rate_limit tests allow), and the two groups run side by
    side: all 20 start within about 9 intervals, not the 19 of one after the other."""
    sup = supervise({"q": {"handler": "tests.test_groups_processes:started", "consumers": 4,
                           "group_rate_limit": "5/s"}})
    procs.wait_registered(sup, 4, redis_client)
    with Producer(redis_url) as p:
        for g in "AB":
            p.publish_many("q", list(range(10)), group=g)
    wait_for(lambda: len(sup.events("start")) >= 20, timeout_s=20,
             message=f"{len(sup.events('start'))} of 20 started within 20 s")
    starts = sup.events("start")
    assert len(starts) == 20
    times = {g: sorted(e["t"] for e in starts if e["group"] == g) for g in "AB"}
    gaps = {g: [round(b - a, 3) for a, b in zip(t, t[1:])] for g, t in times.items()}
    for g in "AB":
        assert len(times[g]) == 10, times
        assert min(gaps[g]) >= 0.2 - 0.02, (g, gaps[g])
        assert times[g][-1] - times[g][0] < 9 * 0.2 + 0.6, (g, gaps[g])
    everything = sorted(times["A"] + times["B"])
    span = everything[-1] - everything[0]
    assert span < 9 * 0.2 + 0.8, f"20 starts took {span:.2f} s: the groups did not go side by side ({gaps})"
    assert times["A"][0] < times["B"][-1] and times["B"][0] < times["A"][-1], times
