"""Running StoreMachine: one private redis-server for every example (emptied
between them), the outbox read size made small, and hypothesis's settings.

Settings: ``derandomize=True`` and no example database, so that a run is
the same sequence of examples on every machine (CI fails or passes on the
code, never on the seed, and nothing is replayed from a local file the
next checkout lacks); ``suite_settings`` bounds the suite's run, and
tests/bench/model.py asks for more examples with a seed of its own.

The outboxes' read size (store/ops/outbox.py DRAIN_BATCH, 500) is made 1 for
the run: what 500 failing entries at the head of an outbox do to the others
behind them, one does here, within a sequence short enough to shrink and
read."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.internal.conjecture import engine

from smqsup.launch.process import RedisServer
from smqsup.store.ops import outbox
from tests.model.driver import Driver
from tests.model.machine import QUEUES, StoreMachine

#: The outbox read size during a run (module docstring).
DRAIN_BATCH = 1


def suite_settings(examples: int, steps: int = 50, *, derandomize: bool = True, every_bug: bool = False) -> settings:
    """Settings for ``examples`` sequences of at most ``steps`` rules each;
    ``every_bug``: shrink and report each distinct failure (else the first)."""
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                    derandomize=derandomize, print_blob=False, report_multiple_bugs=every_bug,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


@contextlib.contextmanager
def store(url: str = "") -> Iterator[Driver]:
    """A Driver on ``url``, or on a private redis-server started for the run
    (a unix socket in a temp dir, no persistence), with the small outbox read."""
    with contextlib.ExitStack() as stack:
        if not url:
            server = RedisServer(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="smqsup-model-"))),
                                 appendfsync="no")
            server.start()
            stack.callback(server.kill)
            url = server.url
        driver = Driver(url, QUEUES)
        stack.callback(driver.close)
        before = outbox.DRAIN_BATCH
        outbox.DRAIN_BATCH = DRAIN_BATCH
        stack.callback(setattr, outbox, "DRAIN_BATCH", before)
        yield driver


def machine_for(driver: Driver) -> Any:
    """StoreMachine bound to ``driver``, as a unittest TestCase-able class."""
    return type("StoreMachineOn", (StoreMachine,), {"driver": driver})


@contextlib.contextmanager
def shrinking_for(seconds: float) -> Iterator[None]:
    """Hypothesis shrinks a failure for at most ``seconds`` (its own bound,
    five minutes, is past the suite's per-test timeout: a failure would be
    killed before it printed)."""
    before = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if before is None:  # (a hypothesis without the knob: its own bound)
        yield
        return
    engine.MAX_SHRINKING_SECONDS = seconds  # type: ignore[assignment]
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = before


def run(driver: Driver, config: settings, shrink_s: float = 300) -> None:
    """Run the machine on ``driver`` under ``config``; raises the shrunk failure."""
    from hypothesis.stateful import run_state_machine_as_test

    with shrinking_for(shrink_s):
        run_state_machine_as_test(machine_for(driver), settings=config)
