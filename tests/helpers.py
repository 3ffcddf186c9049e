"""Small helpers shared by the tests: waiting on a condition with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout_s: float = 10.0,
    interval_s: float = 0.01,
    message: str = "condition not met before the deadline",
) -> T:
    """Call ``predicate`` every ``interval_s`` until it returns a truthy value; return it.

    Raises AssertionError(message) once ``timeout_s`` has passed without one.
    The predicate is always called at least once, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(message)
        time.sleep(min(interval_s, remaining))
