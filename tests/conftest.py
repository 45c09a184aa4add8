"""Fixtures shared by every test level (prerequisite helpers live in tests/support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from srv6pm_topos.lab import Lab
from tests.support import require_root


@pytest.fixture
def net() -> Iterator[Lab]:
    """A fresh namespace lab, torn down (processes ended, namespaces removed) even on failure."""
    require_root()
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()
