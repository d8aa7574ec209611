"""The one source of "now" for the store, the workers and the API.

Times are seconds since the Unix epoch as floats, so they compare the same way in SQLite and PostgreSQL.
Tests install a `FakeClock` with `use()` and move it instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, value: float) -> None:
        with self._lock:
            self._now = value


_current: Clock = SystemClock()


def now() -> float:
    """The current time from the installed clock."""
    return _current.now()


@contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """Install `clock` for the duration of the block."""
    global _current
    previous, _current = _current, clock
    try:
        yield clock
    finally:
        _current = previous


def isoformat(ts: float | None) -> str | None:
    """RFC 3339 text for a stored timestamp, or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
