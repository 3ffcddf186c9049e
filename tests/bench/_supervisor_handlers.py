"""Handlers that tests/bench/supervisor.py runs in the supervisor's consumer processes."""

from __future__ import annotations

import os
import time
from typing import Any


def noop(msg: Any) -> None:
    """Ack at once: the baseline for memory and idle CPU."""


def victim(msg: Any) -> None:
    """Record ``<monotonic ns> <pid> <id> <attempts>`` to $SMQ_BENCH_OUT/starts, then hang
    on the first attempt (so it can be killed mid-message) or hold 0.3 s on a retry (so
    the message is seen in its new consumer's processing list)."""
    line = f"{time.monotonic_ns()} {os.getpid()} {msg.id} {msg.attempts}\n"
    fd = os.open(os.path.join(os.environ["SMQ_BENCH_OUT"], "starts"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    time.sleep(60 if msg.attempts == 0 else 0.3)


def stamp(msg: Any) -> None:
    """Record ``<time.time_ns()> <id>`` to $SMQ_BENCH_OUT/stamps first thing (the host
    clock, the one Redis TIME reads too), then ack."""
    line = f"{time.time_ns()} {msg.id}\n"
    fd = os.open(os.path.join(os.environ["SMQ_BENCH_OUT"], "stamps"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def returned_at(msg: Any) -> int:
    """Return ``time.time_ns()`` as the result: when the handler returned (tests/bench/results.py)."""
    return time.time_ns()


def hold(msg: Any) -> None:
    """Hold the consumer's thread for ``msg.body`` seconds (a message to cancel)."""
    time.sleep(float(msg.body))


async def hold_async(msg: Any) -> None:
    """Hold a task for ``msg.body`` seconds (a message to cancel)."""
    import asyncio

    await asyncio.sleep(float(msg.body))


def sleep20(msg: Any) -> None:
    """Take 20 ms, as a short I/O-bound handler does (tests/bench/autoscale.py)."""
    time.sleep(0.02)
