"""Hooks the hook tests name in their configs (``tests.support.hook_mods:NAME``):
they write what they see to EVENTS (in-process tests) or to the log and
the message's headers (supervised ones)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

#: (hook, what, message body) in the order the hooks ran, in this process.
EVENTS: list[tuple[str, str, Any]] = []
#: Set by a test to free the hooks that hang.
RELEASE = threading.Event()

log = logging.getLogger("tests.support.hook_mods")


class First:
    """Records its before and after, and what the after saw."""

    def before_process(self, message: Any) -> None:
        EVENTS.append(("First", "before", message.body))
        message.headers["first"] = True

    def after_process(self, message: Any, result: Any, error: Any) -> None:
        EVENTS.append(("First", "after", (result, type(error).__name__ if error else None)))


class Second:
    """Records its before and after; a body "refuse" makes its before raise."""

    def before_process(self, message: Any) -> None:
        EVENTS.append(("Second", "before", message.body))
        if message.body == "refuse":
            raise PermissionError("Second refuses this message")

    def after_process(self, message: Any, result: Any, error: Any) -> None:
        EVENTS.append(("Second", "after", (result, type(error).__name__ if error else None)))


class AfterOnly:
    """Only an after_process, which raises on a body "break-after"."""

    def after_process(self, message: Any, result: Any, error: Any) -> None:
        EVENTS.append(("AfterOnly", "after", message.body))
        if message.body == "break-after":
            raise RuntimeError("AfterOnly breaks after")


class RaisesAfter:
    """An after_process raising the BaseException its message's body names
    ("SystemExit", "KeyboardInterrupt", "GeneratorExit"), after logging it."""

    def after_process(self, message: Any, result: Any, error: Any) -> None:
        EVENTS.append(("RaisesAfter", "after", message.body))
        log.warning("hook-raises %s %s in pid %d", message.id, message.body, os.getpid())
        raise {"SystemExit": SystemExit(0), "KeyboardInterrupt": KeyboardInterrupt(),
               "GeneratorExit": GeneratorExit("stray")}[message.body]


class AsyncRaisesAfter(RaisesAfter):
    """RaisesAfter's after_process as an async def."""

    async def after_process(self, message: Any, result: Any, error: Any) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        RaisesAfter.after_process(self, message, result, error)


class AsyncHook:
    """async def methods (for an async handler)."""

    async def before_process(self, message: Any) -> None:
        await asyncio.sleep(0)
        EVENTS.append(("AsyncHook", "before", message.body))

    async def after_process(self, message: Any, result: Any, error: Any) -> None:
        await asyncio.sleep(0)
        EVENTS.append(("AsyncHook", "after", (result, type(error).__name__ if error else None)))


class Hangs:
    """A before_process that hangs until RELEASE (message_timeout must bound it)."""

    def before_process(self, message: Any) -> None:
        EVENTS.append(("Hangs", "before", message.body))
        RELEASE.wait(60)

    def after_process(self, message: Any, result: Any, error: Any) -> None:
        EVENTS.append(("Hangs", "after", (result, type(error).__name__ if error else None)))


class AsyncHangs:
    """An async before_process that awaits until cancelled."""

    async def before_process(self, message: Any) -> None:
        EVENTS.append(("AsyncHangs", "before", message.body))
        await asyncio.sleep(60)

    def after_process(self, message: Any, result: Any, error: Any) -> None:
        EVENTS.append(("AsyncHangs", "after", (result, type(error).__name__ if error else None)))


class Stamp:
    """In a supervised consumer: stamps its pid on the message, logs the after."""

    def before_process(self, message: Any) -> None:
        message.headers["stamped_by"] = os.getpid()

    def after_process(self, message: Any, result: Any, error: Any) -> None:
        log.warning("hook-after %s result=%r error=%s", message.id, result, type(error).__name__ if error else None)


def headers_of(message: Any) -> dict[str, Any]:
    """A handler returning the headers it was given."""
    return dict(message.headers)


class NoMethods:
    """Defines no hook method at all."""


class BadInit:
    """Cannot be made."""

    def __init__(self) -> None:
        raise ValueError("BadInit needs a database")

    def before_process(self, message: Any) -> None:
        """(never reached)"""


class NotCallable:
    before_process = 42


INSTANCE = First()
