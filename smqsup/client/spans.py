"""The send span of a publish call: smqsup.tracing's Send where the producer
traces, UNTRACED (the same calls, doing nothing) where it does not, so that
each publish path reads the same either way and pays a few calls when off."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from smqsup import safe
from smqsup.config import scalars
from smqsup.errors import ConfigError


class _Untraced:
    """A publish's send span where tracing is off: the headers as given, nothing kept."""

    def headers(self, headers: Optional[Mapping[str, Any]], parents: Any = None) -> Optional[Mapping[str, Any]]:
        return headers

    def done(self, ids: list[str], many: bool = False) -> None:
        """(Nothing to end.)"""

    def __enter__(self) -> "_Untraced":
        return self

    def __exit__(self, *raised: Any) -> None:
        """(Nothing to record.)"""


UNTRACED = _Untraced()


def tracing_module(tracing: object) -> Any:
    """smqsup.tracing where ``tracing`` (a producer's argument) is True, imported;
    None where it is False; ConfigError for anything else, or without OpenTelemetry."""
    if tracing is False:
        return None
    if tracing is not True:
        raise ConfigError(f"tracing: expected True or False, got {safe.escape(repr(tracing), 80)}")
    if not scalars.otel_installed():
        raise ConfigError("tracing needs OpenTelemetry: pip install 'smqsup[otel]'")
    from smqsup import tracing

    return tracing
