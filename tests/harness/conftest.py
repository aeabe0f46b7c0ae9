"""Fixtures for the harness's own modules."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def harness() -> Callable[[str], ModuleType]:
    """``harness(name)``: the harness module ``cudagym.harness.<name>``, the one module the reference and candidate
    processes run too (``python -P -m cudagym.harness.child``)."""
    return lambda name: importlib.import_module(f"cudagym.harness.{name}")
