"""Making text safe to show: credentials masked, control characters escaped,
length capped. Every log line, error, page and process title goes through here.
``shown(value)`` does all three for a text a person reads.

Two kinds of help:

- ``mask_url(url)`` shows a Redis url with its password (userinfo and any
  ``password=`` query argument) replaced by ``***``;
- ``register_secret(text)`` remembers a secret (a url's password, a web
  token) so that ``scrub(text)`` removes it from any text, wherever a library
  put it (an exception message, a traceback). ``logs.setup`` scrubs every log
  line; the CLI scrubs every error it prints.

``escape(text)`` makes untrusted text (exception texts, message ids, request
values) one bounded line: every character that is not printable (controls,
line separators, bidirectional formatting, lone surrogates, unassigned code
points) becomes its escape as ``ascii()`` writes it (``\\n``, ``\\x1b``,
``\\u202e``), so that nobody can forge a log line or a terminal sequence, and
text past ``limit`` characters is cut with a note of how much was cut.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote

#: Longest untrusted value put in one log line, in characters.
LOG_VALUE_CHARS = 2000
#: Longest line a log record makes (its traceback included), in bytes of UTF-8.
LOG_LINE_BYTES = 64 * 1024
#: Longest error text a web client is sent, by default, in characters.
ERROR_CHARS = 500
#: Longest url, and longest problem with it, that a config error shows, in characters.
URL_CHARS = 200
#: Secrets shorter than this are not scrubbed from free text (a one-letter
#: password would blank out every such letter); mask_url still hides them.
_SCRUB_MIN_CHARS = 4

_MASK = "***"
_lock = threading.Lock()
_secrets: tuple[str, ...] = ()

# scheme://[user]:password@ as urllib and redis-py read it: the userinfo ends
# at the LAST '@' before the path ('/', '?', '#'), the user at its first ':';
# so a password (or a user) may hold a raw '@'. A match is tried only where a
# run of scheme characters begins (the lookbehind; ``head`` keeps any digits
# before the scheme's first letter): tried at every letter, a long run such
# as 'xxxx...' cost time quadratic in its length, on every log line.
_USERINFO = re.compile(
    r"(?P<head>(?<![A-Za-z0-9+.-])[0-9+.-]*[A-Za-z][A-Za-z0-9+.-]*://[^:/?#\s]*:)(?P<password>[^/?#\s]*)@")
_QUERY_SECRET = re.compile(r"(?P<head>[?&](?:[a-z_]*password|token)=)(?P<value>[^&#\s]*)", re.IGNORECASE)


def mask_url(url: str) -> str:
    """``url`` with its password (and ``password=``/``token=`` query values) as ``***``."""
    if "://" in url:  # most log lines hold no url: skip the pattern's scan
        url = _USERINFO.sub(lambda m: m["head"] + (_MASK if m["password"] else "") + "@", url)
    return _QUERY_SECRET.sub(lambda m: m["head"] + _MASK, url)


def register_secret(secret: str | None) -> None:
    """Remember ``secret`` (and its percent-decoded form) so ``scrub`` removes it."""
    global _secrets
    if not secret:
        return
    forms = {secret, unquote(secret)}
    with _lock:
        found = set(_secrets) | {s for s in forms if len(s) >= _SCRUB_MIN_CHARS}
        # Longest first, so a secret containing another is masked whole.
        _secrets = tuple(sorted(found, key=len, reverse=True))


def register_url(url: str | None) -> None:
    """Register the password a Redis url carries (userinfo or query)."""
    if not url:
        return
    for match in _USERINFO.finditer(url):
        register_secret(match["password"])
    for match in _QUERY_SECRET.finditer(url):
        register_secret(match["value"])


def scrub(text: str) -> str:
    """``text`` with every url password and every registered secret masked."""
    text = mask_url(text)
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, _MASK)
    return text


def _text(value: object) -> str:
    try:
        return value if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - an object whose __str__ fails
        return f"<{type(value).__name__}: str() failed>"


def escape(value: object, limit: int = LOG_VALUE_CHARS, *, cut_before: int = 0) -> str:
    """``str(value)`` as one printable line of at most about ``limit`` characters;
    the note of what was cut counts ``cut_before`` more (cut by the caller)."""
    text = _text(value)
    cut = max(len(text) - limit, 0) + cut_before
    text = text[:limit]
    if not text.isprintable():  # the common case costs one scan in C
        text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return f"{text}...(+{cut} chars)" if cut > 0 else text


def shown(value: object, limit: int = ERROR_CHARS) -> str:
    """``value`` as one line for a person (an error, a log line, a web
    reply): secrets masked, as ``escape`` makes it, at most about ``limit``
    characters. Scrubbed before the cut, so no secret's head survives it, and
    after a first cut at ``10 * limit``, so that a huge text costs a bounded scrub."""
    text = _text(value)
    head = text[: 10 * limit]
    return escape(scrub(head), limit, cut_before=len(text) - len(head))


def set_title(title: str) -> None:
    """Set the process title ``ps`` shows in place of the command line (left
    alone where setproctitle is missing). ``title`` must already be safe to
    show: a queue name, a config path, never a url or a token."""
    try:
        from setproctitle import setproctitle
    except ImportError:
        return
    setproctitle(title)
