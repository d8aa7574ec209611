"""Every test here runs on each store in TEST_DATABASES (see `databases` markers for exceptions)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _store_of_this_test(store_of_this_test: str) -> str:
    return store_of_this_test
