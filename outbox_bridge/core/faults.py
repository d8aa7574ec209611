"""Test-only fault points: `OUTBOX_BRIDGE_FAULTS=point[:SIGNAL],...` makes a process signal itself there.

Used by the end-to-end tests to kill a process at an exact boundary (between commit and ack, between
publish and mark). Unset in production, where `hit` is a dictionary lookup that finds nothing.
"""

from __future__ import annotations

import os
import signal
from functools import cache


@cache
def _armed() -> dict[str, signal.Signals]:
    armed: dict[str, signal.Signals] = {}
    for item in os.environ.get("OUTBOX_BRIDGE_FAULTS", "").split(","):
        if not item.strip():
            continue
        point, _, name = item.strip().partition(":")
        armed[point] = signal.Signals[f"SIG{name or 'KILL'}"]
    return armed


def hit(point: str) -> None:
    """Deliver the armed signal to this process if `point` is armed."""
    sig = _armed().get(point)
    if sig is not None:
        os.kill(os.getpid(), sig)
