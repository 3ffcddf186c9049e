"""A section of queues.yaml read as a mapping: only its known keys (an unknown one named with a did-you-mean),
every value ${VAR}-expanded and storable, and each key's value validated, or its default when absent.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import TypeVar

from smqsup.config.env import expand_env, storable
from smqsup.config.problems import Validator, error, join_key, key_text
from smqsup.errors import ConfigError

_T = TypeVar("_T")


def mapping(value: object, key: str, path: str, allowed: Collection[str]) -> dict[str, object]:
    """A mapping with only ``allowed`` keys, its string values env-expanded (null: an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error("expected a mapping", value, path=path, key=key)
    for name in value:
        if not isinstance(name, str) or name not in allowed:
            raise _unknown_key(name, key, path, allowed)
    expanded: dict[str, object] = {}
    for name, item in value.items():
        where = join_key(key, name)
        expanded[name] = storable(expand_env(item, where, path), where, path)
    return expanded


#: Keys an unknown key's error lists at most.
_KEYS_LISTED = 16


def _unknown_key(name: object, key: str, path: str, allowed: Collection[str]) -> ConfigError:
    close = difflib.get_close_matches(key_text(name), list(allowed), n=1)
    if close:
        problem = f"unknown key, did you mean {close[0]!r}?"
    elif len(allowed) <= _KEYS_LISTED:
        problem = f"unknown key (expected one of: {', '.join(allowed)})"
    else:  # (a queue's options: the line stays short; the README lists them all)
        listed = list(allowed)[:_KEYS_LISTED]
        problem = (f"unknown key (expected one of: {', '.join(listed)}, or {len(allowed) - _KEYS_LISTED} more: "
                   f"see the README)")
    return error(problem, path=path, key=join_key(key, name))


def get(raw: Mapping[str, object], name: str, key: str, path: str, check: Validator[_T], default: _T) -> _T:
    """``raw[name]`` validated, or ``default`` when the key is absent."""
    if name not in raw:
        return default
    return required(raw[name], join_key(key, name), path, check)


def required(value: object, key: str, path: str, check: Validator[_T]) -> _T:
    """``value`` validated; null (a key written with no value) is refused."""
    if value is None:
        raise error("a value is required", value, path=path, key=key)
    return check(value, key, path)
