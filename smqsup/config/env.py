"""What every raw string of queues.yaml goes through before its validator:
``${VAR}`` / ``${VAR:-default}`` expansion (the result, an EnvStr, may spell
a number or a boolean) and the refusal of text no file, log or Redis can hold.
"""

from __future__ import annotations

import os
import re

from smqsup.config.problems import error


class EnvStr(str):
    """A string that ${VAR} expansion produced: it may spell a number or a boolean."""


_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ENV_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_ENV_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)


def expand_env(value: object, key: str, path: str) -> object:
    """``value`` with ${VAR} / ${VAR:-default} replaced; non-strings unchanged."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        if match[0] == "$${":
            return "${"
        if match[1] is None:
            raise error("unterminated '${'", value, path=path, key=key)
        body = _ENV_BODY.fullmatch(match[1])
        if body is None:
            raise error(f"invalid variable reference {match[0]!r}", value, path=path, key=key)
        name, fallback = body[1], body[2]
        current = os.environ.get(name)
        if fallback is not None and not current:
            return fallback
        if current is None:
            problem = f"environment variable {name} is not set (give a default: ${{{name}:-...}})"
            raise error(problem, value, path=path, key=key)
        return current

    return EnvStr(_ENV_REF.sub(substitute, value))


def storable(value: object, key: str, path: str) -> object:
    """``value``, unless it is a string no file, log or Redis can hold.

    YAML's ``"\\ud800"`` escape and environment values that were not UTF-8
    (surrogate-escaped bytes) make lone surrogates: encoding one raises later,
    far from the config (a data_dir with one fails the supervisor's start).
    """
    if isinstance(value, str) and _SURROGATE.search(value):
        raise error("not UTF-8 text (it holds a lone surrogate)", value, path=path, key=key)
    return value

