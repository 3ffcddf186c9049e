"""A handler module whose consumer dies at the worst moment for a parent:
right after the ack that ended it, before it tells the children (its
outbox): only the elected collector can release them then."""

from __future__ import annotations

import os
from typing import Any

from smqsup.worker.settling import Settler
from tests.support.handlers import family


def _die(self: Settler) -> None:
    os._exit(9)


Settler._tell = _die  # type: ignore[method-assign]


def handle(msg: Any) -> Any:
    """tests.support.handlers.family."""
    return family(msg)
