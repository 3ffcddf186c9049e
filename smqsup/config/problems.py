"""How a bad value in queues.yaml is reported: the one-line ConfigError
``path: key: problem, got value`` every validator raises, with the value and
the key shown short, escaped and on one line whatever YAML made of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from smqsup import safe
from smqsup.errors import ConfigError

#: Longest bad value or key an error shows, in characters (integers longer
#: than this are shown by their number of digits).
_SHOWN_CHARS = 80

_T = TypeVar("_T")
#: A validator takes (value, key path, file path) and returns the coerced value.
Validator = Callable[[object, str, str], _T]

#: Marks an absent key (None is YAML's null, which is a value).
MISSING: Any = object()


def show(value: object) -> str:
    """A short printable form of a bad value (containers by kind, not content)."""
    if isinstance(value, (dict, list)) and value:
        return "a mapping" if isinstance(value, dict) else "a list"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # repr() of an int past 4300 digits raises ValueError: count without it.
        digits = int(value.bit_length() * math.log10(2))
        while 10**digits <= abs(value):
            digits += 1
        if digits > _SHOWN_CHARS:
            return f"an integer of {digits} digits"
    text = repr(str(value)) if isinstance(value, str) else repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def key_text(name: object) -> str:
    """A key as a key path shows it: one short line, whatever YAML made of it."""
    shown = show(name) if isinstance(name, int) else ""
    return f"<{shown}>" if shown.startswith("an integer of ") else safe.escape(name, _SHOWN_CHARS)


def error(
    problem: str,
    value: object = MISSING,
    *,
    path: str = "",
    key: str = "",
    cls: type[ConfigError] = ConfigError,
) -> ConfigError:
    """The one-line error ``path: key: problem, got value`` (empty parts left out)."""
    if value is not MISSING:
        problem = f"{problem}, got {show(value)}"
    text = ": ".join(part for part in (path, key, problem) if part)
    # Exception texts quoted in a problem may span lines; the error never does,
    # nor does it carry a control character, a bidi override or a lone surrogate.
    return cls(safe.escape(re.sub(r"\s*[\r\n]+\s*", " ", text)), path=path, key=key)


def join_key(key: str, name: object) -> str:
    return f"{key}.{key_text(name)}" if key else key_text(name)

