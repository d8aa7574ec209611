"""Every test here runs on each store in TEST_DATABASES (see `databases` markers for exceptions)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import procs


@pytest.fixture(autouse=True)
def _store_of_this_test(store_of_this_test: str) -> str:
    return store_of_this_test


@pytest.fixture
def started() -> Iterator[list[procs.Proc]]:
    """Every process a test starts (it appends them); whatever is still alive at the end is killed."""
    running: list[procs.Proc] = []
    yield running
    for proc in running:
        if proc.alive():
            proc.kill()
