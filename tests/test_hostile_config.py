"""Hostile queues.yaml files: whatever a file holds, loading it fails in one line and a
running supervisor survives it on SIGHUP, keeping its consumers.

The fuzz tests draw from a seeded generator and name the seed when they fail;
``SMQSUP_FUZZ_SEED=N`` replays a run.
"""

from __future__ import annotations

import logging
import os
import random
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from smqsup.config import model as config
from smqsup.errors import ConfigError
from smqsup.supervisor import arbiter as arbiter_mod
from smqsup.supervisor import scaling as scaling_mod
from smqsup.supervisor.arbiter import Arbiter
from smqsup.supervisor.protocol import MAX_SLOTS
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

REJECTED = "SIGHUP: new config rejected, keeping the old one"
DEEP_LISTS = "[" * 5000 + "]" * 5000 + "\n"
DEEP_MAPPINGS = "{a: " * 5000 + "1" + "}" * 5000 + "\n"


def _rejected_lines(sup: procs.Supervisor) -> list[str]:
    return [line for line in sup.log().splitlines() if REJECTED in line]


# --- hostile documents ---------------------------------------------------------------

BASE = """\
redis:
  url: redis://127.0.0.1:1/0
namespace: smq
heartbeat_interval: 1s
heartbeat_timeout: 10s
shutdown_timeout: 30s
defaults: &defaults
  retry_threshold: 3
  consumers: {min: 1, max: 8}
  scale_cooldown: 1s
queues:
  orders:
    <<: *defaults
    handler: myapp.handlers:process_order
    consumers: 4
    scale_up_lag: 5s
    scale_up_backlog: 20
    scale_down_after: 1m
    retry_delay: 5s
    message_timeout: 60s
    max_messages: 10000
    max_memory: 512MB
    dedup_ttl: 24h
    rate_limit: 100/s
    rate_burst: 3
    partitions: 2
    concurrency: 4
    prefetch: 16
web:
  listen: 127.0.0.1:8087
schedules:
  nightly:
    queue: orders
    cron: "0 3 * * *"
    timezone: Europe/Berlin
    body: {kind: nightly, day: 1}
    headers: {source: cron}
    catch_up: false
    grace: 1m
  tick:
    queue: orders
    every: 30s
"""
#: Scalars that reach the validators: huge, non-finite, malformed, unprintable.
SCALARS = [
    "9" * 500, "9" * 5000, "-" + "9" * 500, "0x" + "f" * 4000, "0o" + "7" * 3000, "0b" + "1" * 5000,
    "1" + "0" * 400 + "s", "9" * 400 + "MB", "9" * 400 + ".5KB", "1e400", "1.0e+400", ".nan", ".inf", "-.inf",
    "-1", "0", "1000", "1001", "1:30:00", "1_000", "0.0000001", "1" * 20 + "d", "2001-02-30",
    "2001-12-14t21:59:43.10-05:00", '"\\ud800"', '"\\udfff\\ud800x"', '"\\x00\\x1b[2J"', '"\\u2028\\x85"',
    "'é中文🙂'", '"\\U0010ffff"', "''", "' '", "'.'", "'..'", "'a:b'", "'{x}'", "~", "true", "yes", "no",
    "'" + "x" * 5000 + "'", "${SMQSUP_FUZZ_A}", "${SMQSUP_FUZZ_B:-nan}", "${SMQSUP_FUZZ_C}", "'${'", "$${x}",
    "${1BAD}", "${SMQSUP_FUZZ_UNSET}", "!!int foo", "!!float foo", "!!bool foo", "!!timestamp foo",
    "!!binary '!!!'", "!!binary aGVsbG8=", "!!set {a, b}", "!!omap [a: 1]", "!!pairs [a: 1]", "!!str [1]",
    "!custom 1", "!!python/object/apply:os.system [ls]", "[]", "{}", "[1, [2]]", "{a: 1}", "*undefined",
    "m:f", "'tests.support.handlers:record'", "redis://h:99999/0", "'[::1]:0'", "16MB", "1.5", "3",
    "{min: 5, max: 2}", "{max: 8}", "{min: 1, max: 1024}", "{max: ~}",
]
#: What ${SMQSUP_FUZZ_A}, _B and _C may hold (surrogate-escaped bytes included).
ENV_VALUES = ["nan", "inf", "-inf", "1e999", "9" * 500, "9" * 5000, "\udcff", "", "true", " 3 ", "٣", "-0", "1s",
              "x\ny"]
KEYS = ["redis", "url", "namespace", "max_message_size", "heartbeat_interval", "heartbeat_timeout",
        "shutdown_timeout", "preload", "stats", "defaults", "queues", "web", "listen", "token", "handler",
        "consumers", "retry_threshold", "retry_delay", "retry_backoff", "retry_delay_max", "message_timeout",
        "max_messages", "max_memory", "dedup_ttl", "concurrency", "prefetch", "rate_limit", "rate_burst", "partitions", "result_ttl", "events", "events_max", "min", "max", "scale_up_lag",
        "scale_up_backlog", "scale_down_after", "scale_cooldown", "orders", "<<", "'\\ud800'", "9" * 600, "~", "[a]", "'.'", "é"]


KEYS += ["schedules", "queue", "cron", "every", "timezone", "body", "headers", "catch_up", "grace", "nightly"]
#: Values of a schedule's keys that come close to valid, and hostile ones.
SCHEDULE_SCALARS = ["'0 3 * * *'", "'*/15 * * * * *'", "'61 * * * *'", "'* * */20 * 1L'", "'@daily'", "'@reboot'",
                    "'0 3 * * * * *'", "'" + "1," * 3000 + "1 * * * *'", "Europe/Berlin", "europe/berlin", "'../x'",
                    "'Etc/GMT+5'", "zone.tab", "1s", "999ms", "366d", "'${SMQSUP_FUZZ_A}'", "{smqsup-x: 1}",
                    "{a: [1, {b: .nan}]}", "2020-01-01", "!!binary aGVsbG8=", "!!set {a}", "{1: 2}"]
BASE_SCHEDULES_LINE = BASE.splitlines().index("schedules:")
#: Values of rate_limit, rate_burst, partitions, concurrency and prefetch that come close to valid, and hostile ones.
RATE_SCALARS = ["1/d", "1/day", "2/DAY", "0.5/d", "1000000/s", "1000001/s", "1/w", "100/days", "-1/s", "'.nan/s'",
                "'inf/s'", "1e9/s", "'1/0s'", "'9999999999/s'", "'1/s/s'", "'١/s'", "'100 / sec'", "'5/min'",
                "'1/hour'", "'0/s'", "'/s'", "'100'", "100", "64", "65", "0", "-2", "2.5", "1e9", "100000", "100001",
                "1000", "1001", "'2'", "true"]
RATE_KEYS = ("    rate_limit:", "    rate_burst:", "    partitions:", "    concurrency:", "    prefetch:")


def _with_hostile_values(rng: random.Random) -> str:
    """BASE with one to three values (or queue names) swapped for hostile scalars."""
    lines = BASE.splitlines()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        head, sep, _value = lines[i].partition(": ")
        value = rng.choice(SCHEDULE_SCALARS if i > BASE_SCHEDULES_LINE and rng.random() < 0.5 else
                           RATE_SCALARS if lines[i].startswith(RATE_KEYS) and rng.random() < 0.7 else SCALARS)
        lines[i] = f"{head}{sep}{value}" if sep else f"  {value}:" if lines[i] == "  orders:" else lines[i]
    return "\n".join(lines) + "\n"


def _tree(rng: random.Random, depth: int = 0) -> str:
    """A random flow-style value: mappings of known and hostile keys, lists, anchors, aliases, merges."""
    roll = rng.random()
    if depth > 5 or roll < 0.45:
        return rng.choice(SCALARS)
    if roll < 0.7:
        items = [f"{rng.choice(KEYS)}: {_tree(rng, depth + 1)}" for _ in range(rng.randint(0, 4))]
        if rng.random() < 0.2:
            items.append("<<: *a")
        return "{" + ", ".join(items) + "}"
    if roll < 0.9:
        return "[" + ", ".join(_tree(rng, depth + 1) for _ in range(rng.randint(0, 4))) + "]"
    return f"&a {_tree(rng, depth + 1)}" if rng.random() < 0.5 else "*a"


def _random_tree(rng: random.Random) -> str:
    return "queues: " + _tree(rng) + "\n" + "\n".join(
        f"{rng.choice(KEYS)}: {_tree(rng)}" for _ in range(rng.randint(0, 5))) + "\n"


def _deep(rng: random.Random) -> str:
    """Nesting from just past the bound to thousands of levels, in flow and block style."""
    n = rng.choice([19, 20, 21, 22, 50, 200, 5000])
    style = rng.randrange(4)
    if style == 0:
        return "queues: " + "[" * n + "]" * n + "\n"
    if style == 1:
        return "queues: " + "{a: " * n + "1" + "}" * n + "\n"
    if style == 2:
        return "".join(" " * i + "a:\n" for i in range(n)) + " " * n + "b: 1\n"
    return "queues: " + "- " * n + "x\n"


def _bomb(rng: random.Random) -> str:
    """Alias bombs: nested aliases, merge chains, one mapping merged thousands of times."""
    kind = rng.randrange(3)
    if kind == 0:
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
        return "\n".join(lines) + "\nqueues: *a8\n"
    if kind == 1:
        n = rng.choice([50, 250, 500])
        return "a0: &a0 {k0: 1}\n" + "".join(f"a{i}: &a{i} {{<<: *a{i - 1}, k{i}: 1}}\n" for i in range(1, n))
    keys = ", ".join(f"k{i}: {i}" for i in range(rng.choice([10, 300])))
    return f"x: &a {{{keys}}}\nqueues: {{q: {{<<: [{', '.join(['*a'] * rng.choice([10, 500]))}]}}}}\n"


def _garbage(rng: random.Random) -> str:
    """Random bytes read as UTF-8 (invalid bytes as lone surrogates), or random YAML punctuation."""
    if rng.random() < 0.5:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 400))).decode("utf-8", "surrogateescape")
    return "".join(rng.choice("{}[],:-?&*!|>'\"%@`#\n\t ab01.~") for _ in range(rng.randint(1, 400)))


def _mangled(rng: random.Random) -> str:
    """BASE with characters deleted, doubled or replaced by YAML punctuation."""
    text = list(BASE)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(text))
        text[i] = rng.choice(["", text[i] * 2, "{", "[", ":", "-", "&", "*", "!", "'", '"', "\t", "\n  "])
    return "".join(text)


#: Each generator, as often as its weight says (bombs and deep nesting are the slow ones).
GENERATORS: list[Callable[[random.Random], str]] = (
    [_with_hostile_values] * 6 + [_random_tree] * 5 + [_mangled] * 4 + [_garbage] * 3 + [_deep] * 2 + [_bomb])


def _seed() -> int:
    return int(os.environ.get("SMQSUP_FUZZ_SEED") or random.SystemRandom().randrange(1, 2**32))


def _outcome(text: str) -> str:
    """'loaded', or how it failed ('key error', 'yaml error') with a one-line, printable ConfigError."""
    try:
        config.loads(text, "fuzz.yaml")
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("fuzz.yaml: ") and message.isprintable(), message
        message.encode("utf-8")
        return "key error" if exc.key else "yaml error"
    return "loaded"


# --- config.loads, fuzzed ----------------------------------------------------------------


def test_loads_survives_thousands_of_hostile_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 random and adversarial documents: each loads, or fails with a one-line printable ConfigError."""
    seed = _seed()
    rng = random.Random(seed)
    outcomes = {"loaded": 0, "key error": 0, "yaml error": 0}
    for i in range(3000):
        for name in ("SMQSUP_FUZZ_A", "SMQSUP_FUZZ_B", "SMQSUP_FUZZ_C"):
            monkeypatch.setenv(name, rng.choice(ENV_VALUES))
        text = rng.choice(GENERATORS)(rng)
        try:
            outcomes[_outcome(text)] += 1
        except Exception as exc:  # noqa: BLE001 - any other outcome is the failure reported
            pytest.fail(f"seed {seed} (replay: SMQSUP_FUZZ_SEED={seed}), document {i}: "
                        f"{type(exc).__name__}: {str(exc)[:300]} for {text[:300]!r}")
    # The generator reaches the validators, not only the YAML parser.
    assert outcomes["loaded"] > 50 and outcomes["key error"] > 500, (seed, outcomes)


# --- a real supervisor, on SIGHUP ----------------------------------------------------------


def test_check_and_start_refuse_deep_nesting_in_one_line(tmp_path: Path) -> None:
    """`smqsup check` and `smqsup -c` on 5,000-deep YAML: exit 2, one line, no traceback."""
    path = tmp_path / "deep.yaml"
    for text in (DEEP_LISTS, DEEP_MAPPINGS):
        path.write_text(text)
        for args in (("check", "-c", str(path)), ("-c", str(path))):
            r = procs.run(*args, timeout=30)
            assert r.returncode == 2, r.stderr
            [line] = r.stderr.strip().splitlines()
            assert line.startswith(f"Error: {path}: invalid YAML at line 1:") and "nested deeper" in line


def test_sighup_with_deeply_nested_yaml_keeps_the_supervisor_and_its_consumers(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket) -> None:
    """Deep lists, then deep mappings on SIGHUP: one rejection line each, same consumer pids."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2}}, notify)
    notify.wait("READY=1")
    before = {c.pid for c in sup.children()}
    for count, text in enumerate((DEEP_LISTS, DEEP_MAPPINGS), 1):
        sup.cfg.write_text(text)
        sup.signal(signal.SIGHUP)
        wait_for(lambda count=count: len(_rejected_lines(sup)) == count or sup.proc.poll() is not None, timeout_s=15)
        assert sup.proc.poll() is None, sup.log()
        assert "nested deeper than 20 levels" in _rejected_lines(sup)[-1]
    assert {c.pid for c in sup.children()} == before


def _bad_files(rng: random.Random, queue: str) -> list[bytes]:
    """One file of each hostile kind, drawn at random, in a random order; each is a rejected config."""
    def option(line: str) -> bytes:
        return f"queues:\n  {queue}:\n    handler: tests.support.handlers:record\n    {line}\n".encode()

    kinds: list[Callable[[], bytes]] = [
        lambda: _deep(rng).encode(),
        lambda: option(f"{rng.choice(['consumers', 'max_messages', 'retry_threshold', 'concurrency'])}: "
                       f"{'9' * rng.choice([500, 5000])}"),
        lambda: option(f"max_memory: {'9' * 400}MB"),
        lambda: option(f"retry_delay: 1{'0' * 400}s"),
        lambda: option(f"consumers: {rng.choice(['[1]', '{a: 1}', 'true', '2.5'])}"),
        lambda: option(rng.choice(["consumers: {min: 5, max: 2}", "consumers: {min: 2}", "consumers: {max: 0}",
                                   "scale_up_lag: .nan", "scale_cooldown: 0", "scale_up_backlog: true"])),
        lambda: option(f"{rng.choice(['consumerz', 'retry', '9' * 600])}: 1"),
        lambda: option("#" * 300_000),
        lambda: bytes(rng.randrange(256) for _ in range(rng.randint(1, 2000))),
        lambda: f"queues: {rng.choice(['[q]', '7', 'x', '{}'])}\n".encode(),
        lambda: f"queues:\n  '{rng.choice(['.', '..'])}':\n    handler: tests.support.handlers:record\n".encode(),
        lambda: _bomb(rng).encode(),
    ]
    rng.shuffle(kinds)
    files = [kind() for kind in kinds]
    for data in files:  # each must be refused, or the test would prove nothing
        with pytest.raises(ConfigError):
            config.loads(data.decode("utf-8", "replace"), "check.yaml")
    return files


def test_a_supervisor_survives_a_series_of_hostile_reloads_then_applies_a_good_one(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str) -> None:
    """Random bad files on SIGHUP: one line each, same consumers; the good file after them is applied."""
    seed = _seed()
    queues = {"q": {"handler": "tests.support.handlers:record", "consumers": 2}}
    sup = supervise(queues, notify)
    notify.wait("READY=1")
    before = {c.pid for c in sup.children()}
    files = _bad_files(random.Random(seed), "q")
    for count, data in enumerate(files, 1):
        sup.cfg.write_bytes(data)
        sup.signal(signal.SIGHUP)
        wait_for(lambda count=count: len(_rejected_lines(sup)) >= count or sup.proc.poll() is not None, timeout_s=15,
                 message=f"seed {seed}: no rejection line for file {count}: {data[:200]!r}")
        assert sup.proc.poll() is None, f"seed {seed}: the supervisor died on {data[:200]!r}\n{sup.log()}"
    assert len(_rejected_lines(sup)) == len(files), f"seed {seed}"
    assert "Traceback" not in sup.log() and {c.pid for c in sup.children()} == before, f"seed {seed}"

    queues["q"]["consumers"] = 3
    procs.write_config(sup.cfg, redis_url, queues)
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    notify.wait("READY=1", notify.wait("RELOADING=1", mark))
    pids = {c.pid for c in sup.children()}
    assert len(pids) == 3 and before < pids, f"seed {seed}"
    assert "SIGHUP: scaled: q 2->3" in sup.log()


# --- the arbiter's handlers, on an Arbiter that never runs its loop -------------------


@pytest.fixture
def arbiter(tmp_path: Path, redis_url: str) -> Iterator[Arbiter]:
    """An Arbiter for two queues (a: 2, b: 1 consumers) whose loop is never started: nothing forks."""
    path = procs.write_config(tmp_path / "queues.yaml", redis_url,
                              {"a": {"handler": "tests.support.handlers:record", "consumers": 2},
                               "b": {"handler": "tests.support.handlers:record"}})
    arb = Arbiter(config.load(path), redis_url, None)
    yield arb
    arb.broker.close()
    os.close(arb._wake_r)
    os.close(arb._wake_w)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the arbiter and its scaler (SIGTTIN, SIGTTOU) said."""
    return [r.getMessage() for r in caplog.records if r.name in (arbiter_mod.__name__, scaling_mod.__name__)]


@pytest.mark.parametrize("broken", ["load", "plan"])
def test_an_unexpected_error_in_a_reload_is_one_line_and_keeps_the_old_config(
        arbiter: Arbiter, broken: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Not a ConfigError but a bug (here a RuntimeError with a newline) while loading or planning: one escaped line."""
    def boom(*args: object) -> None:
        raise RuntimeError("bug\nsecond line")

    monkeypatch.setattr(arbiter_mod.config_mod if broken == "load" else arbiter_mod, broken, boom)
    old = arbiter.cfg
    caplog.set_level(logging.INFO)
    arbiter.handle_hup()
    assert arbiter.cfg is old and {n: q.target for n, q in arbiter.pool.queues.items()} == {"a": 2, "b": 1}
    assert _messages(caplog) == [
        "SIGHUP: new config rejected, keeping the old one: unexpected RuntimeError: bug\\nsecond line"]


def test_sigttin_stops_at_the_per_queue_and_total_bounds(
        arbiter: Arbiter, caplog: pytest.LogCaptureFixture) -> None:
    """SIGTTIN never raises a queue past 1000 consumers nor all queues past 1024; it says so."""
    caplog.set_level(logging.INFO)
    arbiter.pool.queues["a"].target = config.CONSUMERS_PER_QUEUE_MAX
    arbiter.handle_ttin()
    assert (arbiter.pool.queues["a"].target, arbiter.pool.queues["b"].target) == (1000, 2)
    arbiter.handle_ttin()
    assert (arbiter.pool.queues["a"].target, arbiter.pool.queues["b"].target) == (1000, 3)
    arbiter.pool.queues["b"].target = config.CONSUMERS_TOTAL_MAX - 1000
    caplog.clear()
    arbiter.handle_ttin()
    assert (arbiter.pool.queues["a"].target, arbiter.pool.queues["b"].target) == (1000, 24)
    assert _messages(caplog) == [
        "SIGTTIN: queue a stays at 1000 consumers (at most 1000 per queue, 1024 in all queues)",
        "SIGTTIN: queue b stays at 24 consumers (at most 1000 per queue, 1024 in all queues)"]


def _take_every_slot(arbiter: Arbiter) -> int:
    """Allocate child slots until the table is full; how many were free."""
    taken = 0
    with pytest.raises(IndexError):
        while True:
            arbiter.pool.slots.allocate()
            taken += 1
    return taken


def test_a_full_slot_table_refuses_to_start_a_child_and_says_so_once(
        arbiter: Arbiter, caplog: pytest.LogCaptureFixture) -> None:
    """When every child slot is taken, reconcile starts nothing, raises nothing, and logs one line."""
    assert _take_every_slot(arbiter) == MAX_SLOTS
    caplog.set_level(logging.INFO)
    for _ in range(3):
        arbiter.pool.reconcile()
    assert arbiter.pool.children == {}
    assert _messages(caplog) == [
        f"queue a: not starting a consumer: all {MAX_SLOTS} child slots are in use (children still stopping?); "
        "starting it once one is free"]


def test_a_failing_fork_refuses_to_start_a_child_and_says_so_once(
        arbiter: Arbiter, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """fork() failing (a process limit) starts nothing, raises nothing, logs once and gives the slot back."""
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    caplog.set_level(logging.INFO)
    for _ in range(3):
        arbiter.pool.reconcile()
    assert arbiter.pool.children == {}
    assert _messages(caplog) == [
        "queue a: not starting a consumer: fork failed (Resource temporarily unavailable); trying again each tick"]
    assert _take_every_slot(arbiter) == MAX_SLOTS


# --- autoscaling: consumers as a range, the scale_* options ---------------------------------

ORDERS = "queues:\n  orders:\n    handler: myapp.handlers:process_order\n"
HUGE = str(10**30)
#: (option, value, the key path's tail after the section, what the error says).
HOSTILE_SCALING = [
    ("consumers", "{min: 5, max: 2}", "consumers", "min (5) is greater than max (2)"),
    ("consumers", "{max: 0}", "consumers.max", "expected a positive integer, got 0"),
    ("consumers", "{min: 0, max: 2}", "consumers.min", "expected a positive integer, got 0"),
    ("consumers", "{max: -1}", "consumers.max", "expected a positive integer, got -1"),
    ("consumers", "{min: -1, max: 3}", "consumers.min", "expected a positive integer, got -1"),
    ("consumers", "{max: 1001}", "consumers.max", "must be at most 1000 (consumers per queue), got 1001"),
    ("consumers", f"{{max: {HUGE}}}", "consumers.max", f"must be at most 1000 (consumers per queue), got {HUGE}"),
    ("consumers", f"{{min: {HUGE}, max: 2}}", "consumers.min", "must be at most 1000 (consumers per queue)"),
    ("consumers", "{max: .nan}", "consumers.max", "expected a positive integer, got nan"),
    ("consumers", "{max: .inf}", "consumers.max", "expected a positive integer, got inf"),
    ("consumers", "{max: true}", "consumers.max", "expected a positive integer, got True"),
    ("consumers", "{max: '8'}", "consumers.max", "expected a positive integer, got '8'"),
    ("consumers", "{max: 2.5}", "consumers.max", "expected a positive integer, got 2.5"),
    ("consumers", "{max: [1]}", "consumers.max", "expected a positive integer, got a list"),
    ("consumers", "{max: {n: 1}}", "consumers.max", "expected a positive integer, got a mapping"),
    ("consumers", "{max: null}", "consumers.max", "a value is required, got None"),
    ("consumers", "{min: null, max: 3}", "consumers.min", "a value is required, got None"),
    ("consumers", "{mx: 4}", "consumers.mx", "unknown key, did you mean 'max'?"),
    ("consumers", "{max: 4, step: 1}", "consumers.step", "unknown key (expected one of: min, max)"),
    ("consumers", "{1: 4}", "consumers.1", "unknown key"),
    ("consumers", "{min: 2}", "consumers.max", "missing: a range needs its max"),
    ("consumers", "{}", "consumers.max", "missing: a range needs its max"),
    ("consumers", "[1, 8]", "consumers", "expected a positive integer, got a list"),
    ("consumers", "true", "consumers", "expected a positive integer, got True"),
    ("consumers", "'8'", "consumers", "expected a positive integer, got '8'"),
    ("consumers", "0", "consumers", "expected a positive integer, got 0"),
    ("consumers", "-1", "consumers", "expected a positive integer, got -1"),
    ("consumers", ".nan", "consumers", "expected a positive integer, got nan"),
    ("consumers", HUGE, "consumers", f"must be at most 1000 (consumers per queue), got {HUGE}"),
    ("consumers", "~", "consumers", "a value is required, got None"),
    ("scale_up_lag", "0", "scale_up_lag", "expected a duration from 100ms to 1h, got 0"),
    ("scale_up_lag", "50ms", "scale_up_lag", "expected a duration from 100ms to 1h, got '50ms'"),
    ("scale_up_lag", "61m", "scale_up_lag", "expected a duration from 100ms to 1h, got '61m'"),
    ("scale_up_lag", "-1", "scale_up_lag", "a duration must not be negative, got -1"),
    ("scale_up_lag", HUGE, "scale_up_lag", f"a duration must be at most 365d, got {HUGE}"),
    ("scale_up_lag", ".nan", "scale_up_lag", "expected a duration like 500ms, 5s, 2m or 1h, got nan"),
    ("scale_up_lag", ".inf", "scale_up_lag", "expected a duration like 500ms, 5s, 2m or 1h, got inf"),
    ("scale_up_lag", "true", "scale_up_lag", "expected a duration like 500ms, 5s, 2m or 1h, got True"),
    ("scale_up_lag", "'nan'", "scale_up_lag", "expected a duration like 500ms, 5s, 2m or 1h, got 'nan'"),
    ("scale_up_lag", "[1]", "scale_up_lag", "got a list"),
    ("scale_up_lag", "~", "scale_up_lag", "a value is required, got None"),
    ("scale_down_after", "0", "scale_down_after", "expected a duration from 1s to 1d, got 0"),
    ("scale_down_after", "999ms", "scale_down_after", "expected a duration from 1s to 1d, got '999ms'"),
    ("scale_down_after", "25h", "scale_down_after", "expected a duration from 1s to 1d, got '25h'"),
    ("scale_down_after", "-1s", "scale_down_after", "a duration must not be negative, got '-1s'"),
    ("scale_down_after", HUGE, "scale_down_after", f"a duration must be at most 365d, got {HUGE}"),
    ("scale_down_after", ".nan", "scale_down_after", "got nan"),
    ("scale_down_after", "-.inf", "scale_down_after", "got -inf"),
    ("scale_down_after", "true", "scale_down_after", "got True"),
    ("scale_down_after", "{a: 1}", "scale_down_after", "got a mapping"),
    ("scale_cooldown", "0", "scale_cooldown", "expected a duration from 100ms to 10m, got 0"),
    ("scale_cooldown", "11m", "scale_cooldown", "expected a duration from 100ms to 10m, got '11m'"),
    ("scale_cooldown", "-1", "scale_cooldown", "a duration must not be negative, got -1"),
    ("scale_cooldown", HUGE, "scale_cooldown", f"a duration must be at most 365d, got {HUGE}"),
    ("scale_cooldown", ".nan", "scale_cooldown", "got nan"),
    ("scale_cooldown", ".inf", "scale_cooldown", "got inf"),
    ("scale_cooldown", "false", "scale_cooldown", "got False"),
    ("scale_cooldown", "'1 fortnight'", "scale_cooldown", "got '1 fortnight'"),
    ("scale_up_backlog", "0", "scale_up_backlog", "expected a positive integer, got 0"),
    ("scale_up_backlog", "-1", "scale_up_backlog", "expected a positive integer, got -1"),
    ("scale_up_backlog", "1000001", "scale_up_backlog",
     "must be at most 1000000 (ready messages per running consumer), got 1000001"),
    ("scale_up_backlog", HUGE, "scale_up_backlog", f"got {HUGE}"),
    ("scale_up_backlog", ".nan", "scale_up_backlog", "expected a positive integer, got nan"),
    ("scale_up_backlog", ".inf", "scale_up_backlog", "expected a positive integer, got inf"),
    ("scale_up_backlog", "true", "scale_up_backlog", "expected a positive integer, got True"),
    ("scale_up_backlog", "'8'", "scale_up_backlog", "expected a positive integer, got '8'"),
    ("scale_up_backlog", "2.5", "scale_up_backlog", "expected a positive integer, got 2.5"),
    ("scale_up_backlog", "[1]", "scale_up_backlog", "expected a positive integer, got a list"),
    ("scale_up_backlog", "~", "scale_up_backlog", "a value is required, got None"),
]


def _scaling_error(text: str) -> str:
    """The ConfigError loading ``text`` raises, checked to be one short printable line."""
    with pytest.raises(ConfigError) as caught:
        config.loads(text, "queues.yaml")
    message = str(caught.value)
    assert "\n" not in message and message.isprintable() and len(message) < 200, message
    return message


@pytest.mark.parametrize("section", ["queues.orders", "defaults"])
@pytest.mark.parametrize(("option", "value", "key", "problem"), HOSTILE_SCALING,
                         ids=[f"{o}={v[:20]}" for o, v, _, _ in HOSTILE_SCALING])
def test_a_hostile_scaling_value_is_one_line_naming_its_key(
        section: str, option: str, value: str, key: str, problem: str) -> None:
    """Each hostile consumers range or scale_* value, per queue and in defaults:, is one line at its key path."""
    if section == "defaults":
        text = f"defaults:\n  {option}: {value}\n" + ORDERS
    else:
        text = ORDERS + f"    {option}: {value}\n"
    message = _scaling_error(text)
    assert message.startswith(f"queues.yaml: {section}.{key}: ") and problem in message, message


def test_the_total_of_consumers_counts_an_autoscaled_queue_by_its_max() -> None:
    """Four queues of {max: 256} fill the 1024; one more consumer anywhere is refused, the max counted, not the min."""
    queues = "".join(f"  q{i}:\n    handler: m:f\n    consumers: {{min: 1, max: 256}}\n" for i in range(4))
    assert sum(q.consumers_most for q in config.loads("queues:\n" + queues, "queues.yaml").queues.values()) == 1024
    assert _scaling_error("queues:\n" + queues + "  extra:\n    handler: m:f\n") == (
        "queues.yaml: queues: at most 1024 consumers in all queues together (an autoscaled queue counts its max), "
        "got 1025")
    message = _scaling_error("defaults:\n  consumers: {max: 1000}\nqueues:\n  a: {handler: m:f}\n  b: {handler: m:f}\n")
    assert message.startswith("queues.yaml: queues: at most 1024 consumers") and message.endswith("got 2000")


# --- web.listen ------------------------------------------------------------------------------


@pytest.mark.parametrize("listen, problem", [
    ("'" + "a" * 300 + ":8087'", "invalid host name"),
    ("'" + "x" * 100_000 + ":8087'", "invalid host name"),
    ('"\\ud800:8087"', "not UTF-8 text"),
    ("${SMQSUP_HOSTILE_LISTEN}", "not UTF-8 text"),  # undecodable bytes from the environment
    ("'localhost:" + "9" * 5000 + "'", "expected host:port"),
    ("'localhost:-1'", "expected host:port"),
    ("'localhost:.nan'", "expected host:port"),
    ("'localhost:0'", "expected a port from 1 to 65535"),
    ("''", "expected host:port"),
    ("", "a value is required"),
    ("[1, 2]", "expected host:port"),
])
def test_a_hostile_web_listen_is_one_line(listen: str, problem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """web.listen undecodable, too long, out of range, NaN, empty or not a string: one short ConfigError line."""
    monkeypatch.setenv("SMQSUP_HOSTILE_LISTEN", "\udcff:8087")
    text = f"queues:\n  q:\n    handler: m:f\nweb:\n  listen: {listen}\n  token: t\n"
    with pytest.raises(ConfigError) as caught:
        config.loads(text, "queues.yaml")
    message = str(caught.value)
    assert message.startswith("queues.yaml: web.listen: ") and problem in message, message
    assert message.isprintable() and len(message) < 300, message
