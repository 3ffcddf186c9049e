"""The validators of names in queues.yaml: queue names and namespaces (they
form Redis keys and the web UI's paths) and handler specs (``module:function``)."""

from __future__ import annotations

import re

from smqsup.config.problems import error
from smqsup.errors import HandlerImportError


def queue_or_namespace(value: object, key: str, path: str) -> str:
    """A queue name or namespace: 1..128 of [A-Za-z0-9_.-], not ``.`` or ``..``."""
    if not isinstance(value, str):
        raise error("expected a name string (quote it)", value, path=path, key=key)
    if re.search(r"[{}]", value):
        problem = "a name must not contain '{' or '}' (they delimit Redis hash tags)"
    elif ":" in value:
        problem = "a name must not contain ':' (it separates Redis key parts)"
    elif not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", value):
        problem = "a name is 1 to 128 characters of A-Z a-z 0-9 _ . -"
    elif value in (".", ".."):
        # A browser resolves them as path segments: /queues/../dead is /dead.
        problem = "a name must not be '.' or '..' (the web UI's paths could not reach it)"
    else:
        return value
    raise error(problem, value, path=path, key=key)


def is_queue_name(value: object) -> bool:
    """Whether ``value`` is a queue name (bytes read back from Redis, say)."""
    return isinstance(value, str) and value not in (".", "..") and re.fullmatch(r"[A-Za-z0-9_.-]{1,128}",
                                                                                  value) is not None


def validate_queue_name(name: object, *, path: str = "", key: str = "") -> str:
    """``name`` if it is a valid queue name, else ConfigError (for config and producer)."""
    return queue_or_namespace(name, key, path)


#: Longest ``module:function`` spec (its import errors quote it whole).
SPEC_CHARS_MAX = 1000

_SPEC = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def handler_spec(value: object, key: str, path: str, what: str = "module:function") -> str:
    """A well-formed ``module:function`` (or ``module:obj.attr``), not imported."""
    if isinstance(value, str) and len(value) > SPEC_CHARS_MAX:
        raise error(f"a '{what}' is at most {SPEC_CHARS_MAX} characters", value, path=path, key=key,
                    cls=HandlerImportError)
    match = _SPEC.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        missing_colon = isinstance(value, str) and ":" not in value
        problem = f"expected '{what}'" + (" (no ':' found)" if missing_colon else "")
        raise error(problem, value, path=path, key=key, cls=HandlerImportError)
    return match[0]


#: Most hooks one queue (or ``defaults:``) may name.
HOOKS_MAX = 32


def hook_specs(value: object, key: str, path: str) -> tuple[str, ...]:
    """A list of 0 to HOOKS_MAX ``module:Class`` specs (not imported), in
    the order their hooks run; an empty list means none (a queue leaves
    out the hooks of ``defaults:``)."""
    if not isinstance(value, list):
        raise error("expected a list of 'module:Class' hooks", value, path=path, key=key)
    if len(value) > HOOKS_MAX:
        raise error(f"at most {HOOKS_MAX} hooks", len(value), path=path, key=key)
    return tuple(handler_spec(item, f"{key}[{i}]", path, "module:Class") for i, item in enumerate(value))
