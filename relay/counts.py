"""What a relay has done, and the rate-limited log line that reports it."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields, replace


@dataclass
class RelayCounts:
    """Counts since the relay started: messages sent, broker confirmations, and rows written back."""

    sent: int = 0
    confirmed: int = 0
    refused: int = 0
    marked: int = 0
    stale: int = 0
    released: int = 0

    def minus(self, other: RelayCounts) -> RelayCounts:
        return RelayCounts(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def line(self) -> str:
        return ", ".join(f"{f.name} {getattr(self, f.name)}" for f in fields(self))

    def idle(self) -> bool:
        return not any(getattr(self, f.name) for f in fields(self))


class Progress:
    """Turns a running count into one report per interval, and none while nothing happens."""

    def __init__(self, counts: RelayCounts) -> None:
        self._counts = counts
        self._since = time.monotonic()
        self._before = replace(counts)

    def report(self) -> str | None:
        """The line for what happened since the last report, or None if nothing did."""
        now = time.monotonic()
        delta = self._counts.minus(self._before)
        elapsed = max(now - self._since, 1e-9)
        self._since, self._before = now, replace(self._counts)
        if delta.idle():
            return None
        rate = delta.marked / elapsed
        return f"published {delta.marked} rows in {elapsed:.1f}s ({rate:.0f}/s); {delta.line()}"
