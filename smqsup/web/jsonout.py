"""Strict JSON for everything the web server sends (API, WebSocket, errors).

What it sends comes partly from bytes in Redis that anyone with access may have
written, so ``dumps`` never fails and never emits what a strict parser refuses:

- NaN and ±Infinity (Python's json writes them bare) become null;
- lone surrogates (from ``"\\udcff"`` escapes or undecodable bytes) become U+FFFD,
  so the text always encodes as UTF-8;
- values nested deeper than MAX_DEPTH become the string ``"(nested too deep)"``;
- integers too long to print (Python refuses over 4300 digits) become null, and
  any other non-JSON value its ``str``.

The fast path is one ``json.dumps``; the cleaning walk runs only when it fails.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from aiohttp import web

from smqsup.message import MAX_NESTING

#: Deepest nesting sent as such (what a publish may nest); deeper values are
#: replaced by a note.
MAX_DEPTH = MAX_NESTING
#: Widest integer sent, in bits (about 3000 digits, under Python's 4300-digit limit).
MAX_INT_BITS = 10_000

_SURROGATE = re.compile(r"[\ud800-\udfff]")
_TOO_DEEP = "(nested too deep)"


def dumps(value: Any, *, compact: bool = False) -> str:
    """``value`` as strict JSON text that encodes as UTF-8 (see module doc)."""
    separators = (",", ":") if compact else (", ", ": ")
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=separators)
        if _SURROGATE.search(text) is None:
            return text
    except (ValueError, TypeError, RecursionError):  # NaN, odd types, too deep, too long an int
        pass
    return json.dumps(_clean(value, 0), allow_nan=False, ensure_ascii=False, separators=separators)


def response(value: Any, status: int = 200) -> web.Response:
    """A JSON response of ``dumps(value)``."""
    return web.Response(text=dumps(value), status=status, content_type="application/json", charset="utf-8")


def error(status: int, text: str) -> web.Response:
    """The response for every refusal: ``{"error": text}`` with ``status``."""
    return response({"error": text}, status)


def _clean(value: Any, depth: int) -> Any:
    """``value`` with everything a strict encoder refuses replaced (module doc)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, int):
        return value if value.bit_length() <= MAX_INT_BITS else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= MAX_DEPTH and isinstance(value, (dict, list, tuple)):
        return _TOO_DEEP
    if isinstance(value, dict):
        return {_clean(str(k), depth): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, depth + 1) for v in value]
    return _clean(str(value), depth)
