"""Hooks: what a hook object is, and the publish hooks a producer runs.

A hook is any object defining one or more of

- ``before_publish(queue, body, headers)``: in a producer, before each
  message is encoded; it may add to (or change) ``headers``, a dict of its
  own for this message; raising refuses the publish (HookFailed, nothing
  sent). Publish hooks run in the order given.
- ``before_process(message)`` and ``after_process(message, result, error)``:
  in a consumer, around each attempt of the queue's handler, as a stack
  (worker/process_hooks.py says the rules).

A producer given no hooks pays nothing per message.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

from smqsup import message, safe
from smqsup.errors import ConfigError, HookFailed, MessageError

#: The methods a consumer runs around a handler.
PROCESS_METHODS = ("before_process", "after_process")
#: Every method a hook may define.
METHODS = ("before_publish", *PROCESS_METHODS)
#: Most hooks one producer may be given.
HOOKS_MAX = 32
#: Longest hook error text a HookFailed quotes, in characters.
TEXT_CHARS = 500


def hook_problem(hook: object) -> Optional[str]:
    """Why ``hook`` cannot be a hook (None: it can): it defines none of
    METHODS, one of them is not callable, or before_publish is async def
    (publish hooks are plain functions, in either producer)."""
    found = [name for name in METHODS if getattr(hook, name, None) is not None]
    if not found:
        return f"defines none of {', '.join(METHODS)}"
    for name in found:
        if not callable(getattr(hook, name)):
            return f"its {name} is not callable"
    if inspect.iscoroutinefunction(getattr(hook, "before_publish", None)):
        return "its before_publish is async def: publish hooks are plain functions"
    return None


def _text(exc: BaseException) -> str:
    """An exception's text, bounded, secrets masked, whatever its __str__ does."""
    try:
        return safe.escape(safe.scrub(str(exc)), TEXT_CHARS)
    except Exception:  # noqa: BLE001 - an exception whose text raises
        return "(its text could not be read)"


def _name(hook: object) -> str:
    return type(hook).__qualname__


class PublishHooks:
    """The before_publish methods of a producer's hooks, in order."""

    def __init__(self, hooks: Sequence[object]) -> None:
        """Check ``hooks`` (ConfigError naming ``hooks[i]``)."""
        if isinstance(hooks, (str, bytes)) or not isinstance(hooks, (list, tuple)):
            raise ConfigError(f"hooks: expected a list of hook objects, got {type(hooks).__name__}")
        if len(hooks) > HOOKS_MAX:
            raise ConfigError(f"hooks: at most {HOOKS_MAX} hooks, got {len(hooks)}")
        for i, hook in enumerate(hooks):
            if inspect.isclass(hook):
                raise ConfigError(f"hooks[{i}]: {hook.__qualname__} is a class: pass an instance of it")
            problem = hook_problem(hook)
            if problem is not None:
                raise ConfigError(f"hooks[{i}]: {_name(hook)} {problem}")
        #: (hook's class name, its before_publish) in order.
        self.calls: list[tuple[str, Callable[..., object]]] = [
            (_name(h), h.before_publish) for h in hooks if getattr(h, "before_publish", None) is not None]

    def __bool__(self) -> bool:
        return bool(self.calls)

    def headers(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]]) -> dict[str, Any]:
        """The headers of one message after every before_publish ran on a
        copy of ``headers``; HookFailed (its cause the hook's error) when
        one raised."""
        if headers is not None and not isinstance(headers, Mapping):
            raise MessageError(f"queue {queue!r}: headers must be a mapping, got {type(headers).__name__}")
        mine: dict[str, Any] = dict(headers) if headers is not None else {}
        for name, before_publish in self.calls:
            try:
                before_publish(queue, body, mine)
            except Exception as exc:
                raise HookFailed(f"queue {queue!r}: before_publish of hook {name} raised "
                                 f"({type(exc).__name__}: {_text(exc)}); nothing was published") from exc
        return mine

    def writers(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]],
                max_size: int) -> list[Callable[..., bytes]]:
        """Each body's envelope writer's ``payload`` (publish_many): one
        writer while the hooks leave the headers as they were for the body
        before, a new one where they differ."""
        out: list[Callable[..., bytes]] = []
        last: Optional[dict[str, Any]] = None
        writer: Optional[message.EnvelopeWriter] = None
        for body in bodies:
            mine = self.headers(queue, body, headers)
            if writer is None or mine != last:
                writer, last = message.EnvelopeWriter(queue, mine, max_size), mine
            out.append(writer.payload)
        return out
