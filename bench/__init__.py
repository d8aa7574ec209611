"""`outbox-bridge bench`: the broker path and the SQLite-only baseline measured side by side, in one run.

numpy and matplotlib come with the optional `bench` extra, not with the runtime: the modules here import them
inside the functions that use them, and `outbox-bridge bench` checks for them first (`missing_extras`)."""

from __future__ import annotations

import importlib.util

EXTRA_MODULES = ("numpy", "matplotlib")
INSTALL_HINT = "pip install 'outbox-bridge[bench]'"


def missing_extras() -> list[str]:
    """The modules of the `bench` extra that this environment lacks."""
    return [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
