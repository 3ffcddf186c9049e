"""The testing kit's fixtures read examples/queues.yaml for these tests
(a project whose queues.yaml sits at its root needs no conftest at all)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def smqsup_config() -> Path:
    return Path(__file__).resolve().parent / "queues.yaml"
