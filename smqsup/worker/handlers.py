"""Handlers: the callable a ``module:function`` spec names, the hooks a
queue's ``hooks:`` name, and ``smqsup check``, which imports every handler
and hook of a config in a throwaway process."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Optional

from smqsup.client.publish_hooks import PROCESS_METHODS, hook_problem
from smqsup.config.model import Config, load
from smqsup.config.names import handler_spec
from smqsup.config.problems import error
from smqsup.errors import ConfigError, HandlerImportError, SmqsupError

#: What the checking child prints once every handler imported.
_COMPLETE = "smqsup-check: every handler imported"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _import_module(module: str, spec: str, path: str, key: str) -> object:
    def fail(problem: str) -> ConfigError:
        return error(problem, spec, path=path, key=key, cls=HandlerImportError)

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module + ".").startswith(exc.name + "."):
            raise fail(f"cannot import module {module!r} ({_describe(exc)}){_where_hint(exc.name)}") from None
        # The module exists but something it imports does not.
        raise fail(f"module {module!r} raised on import ({_describe(exc)})") from exc
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: user code stops nothing here
        raise fail(f"module {module!r} raised on import ({_describe(exc)})") from None


def _where_hint(name: str) -> str:
    """Where a top-level module that was not found was looked for, and the
    usual fix: handlers import relative to the directory smqsup started in."""
    if "." in name:
        return ""  # a package was found, a module inside it was not: the path is right
    return (f"; looked in {os.getcwd()} (the directory smqsup was started in) and PYTHONPATH: run smqsup "
            f"from your project's root, or add that root to PYTHONPATH")


def _refuse_generator(target: object) -> Optional[str]:
    """Why ``target`` cannot be a handler, or None: a generator function
    (``def`` or ``async def`` with ``yield``) returns an iterator without
    running its body, so every message would be acked unhandled."""
    call = target if inspect.isfunction(target) or inspect.ismethod(target) else inspect.getattr_static(
        type(target), "__call__", None)
    if inspect.isgeneratorfunction(target) or inspect.isgeneratorfunction(call):
        return "a generator function (it uses yield): it would ack every message without running; return instead"
    if inspect.isasyncgenfunction(target) or inspect.isasyncgenfunction(call):
        return ("an async generator function (async def with yield): it would ack every message without "
                "running; return instead")
    return None


def _attribute(target: object, name: str, owner: str, spec: str, path: str, key: str) -> object:
    """``getattr(target, name)``; ``owner`` names ``target`` in the error."""
    try:
        return getattr(target, name)
    except AttributeError:
        public = [candidate for candidate in dir(target) if not candidate.startswith("_")]
        close = difflib.get_close_matches(name, public, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise error(f"{owner} has no attribute {name!r}{hint}", spec,
                    path=path, key=key, cls=HandlerImportError) from None


def import_object(spec: str, *, path: str = "", key: str = "") -> object:
    """What ``'module:name'`` (or ``'module:obj.attr'``) names, imported.

    Every failure is a one-line HandlerImportError ending in ``got 'module:name'``.
    """
    module, _, attributes = handler_spec(spec, key, path).partition(":")
    target = _import_module(module, spec, path, key)
    reached: list[str] = []
    for name in attributes.split("."):
        owner = repr(f"{module}:{'.'.join(reached)}") if reached else f"module {module!r}"
        target = _attribute(target, name, owner, spec, path, key)
        reached.append(name)
    return target


def import_handler(spec: str, *, path: str = "", key: str = "") -> Callable[..., object]:
    """The callable that ``'module:function'`` (or ``'module:obj.attr'``) names.

    Every failure is a one-line HandlerImportError ending in ``got 'module:function'``.
    """
    target = import_object(spec, path=path, key=key)
    if not callable(target):
        raise error(f"not callable (it is of type {type(target).__name__})", spec,
                    path=path, key=key, cls=HandlerImportError)
    refused = _refuse_generator(target)
    if refused is not None:
        raise error(refused, spec, path=path, key=key, cls=HandlerImportError)
    return target


def import_hooks(specs: Sequence[str], *, path: str = "", key: str = "", is_async: bool = False) -> list[object]:
    """The hook objects ``specs`` name (worker/process_hooks.py runs them): a class
    is made without arguments, anything else is used as it is. Every
    failure is a one-line HandlerImportError naming ``key[i]``; so is an
    ``async def`` process hook when the handler (``is_async``) is plain."""
    hooks = []
    for i, spec in enumerate(specs):
        where = f"{key}[{i}]"
        target = import_object(spec, path=path, key=where)
        if inspect.isclass(target):
            try:
                target = target()
            except BaseException as exc:  # noqa: BLE001 - user code: one line, never a traceback
                raise error(f"could not be made without arguments ({_describe(exc)})", spec,
                            path=path, key=where, cls=HandlerImportError) from None
        problem = hook_problem(target)
        if problem is None and not is_async:
            problem = next((f"{name} is async def and the handler is not: a plain handler's hooks are plain"
                            for name in PROCESS_METHODS if inspect.iscoroutinefunction(getattr(target, name, None))),
                           None)
        if problem is not None:
            raise error(problem, spec, path=path, key=where, cls=HandlerImportError)
        hooks.append(target)
    return hooks


def check_handlers(cfg: Config, timeout_s: float = 60.0) -> None:
    """Raise HandlerImportError (all failures, one line each) if any handler
    of ``cfg`` cannot be imported, judged in a fresh Python process.

    The checking happens in a child so that the caller (the supervisor
    parent, or the CLI) never runs user code and is not changed by it. The
    check passes only when the child says so after the last import: a module
    that ends the process while it is imported (``os._exit(0)``) fails it."""
    try:
        proc = subprocess.run([sys.executable, "-m", "smqsup.worker.handlers", str(cfg.path)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise HandlerImportError(f"{cfg.path}: importing the handlers took over {timeout_s:.0f} s") from None
    lines = [line for line in proc.stderr.splitlines() if line.strip().startswith(f"{cfg.path}:")]
    if proc.returncode != 0 and lines:
        raise HandlerImportError("\n".join(lines))
    if proc.returncode != 0 or _COMPLETE not in proc.stdout.splitlines():
        # Ended without finishing the imports: a handler module stopped the process.
        raise HandlerImportError(f"{cfg.path}: importing the handlers ended the checking process "
                                 f"({_ended(proc.returncode)}) before every handler was imported")


def _main(path: str) -> int:
    from smqsup.worker.runners import is_async_handler  # (the child's only: it brings redis-py, the parent needs none)
    try:
        cfg = load(path)
    except SmqsupError as exc:
        print(exc, file=sys.stderr)
        return 2
    failed = 0
    for name, q in cfg.queues.items():
        try:
            handler = import_handler(q.handler, path=str(cfg.path), key=f"queues.{name}.handler")
        except SmqsupError as exc:
            print(exc, file=sys.stderr)
            failed += 1
            continue
        try:
            import_hooks(q.hooks, path=str(cfg.path), key=f"queues.{name}.hooks", is_async=is_async_handler(handler))
        except SmqsupError as exc:
            print(exc, file=sys.stderr)
            failed += 1
    if failed:
        return 2
    sys.stdout.flush()
    print(_COMPLETE, flush=True)
    return 0


def _ended(returncode: int) -> str:
    return f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
