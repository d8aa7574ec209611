"""The one source of "now" for the store, the workers and the API.

Times are seconds since the Unix epoch as floats, so they compare the same way in SQLite and PostgreSQL.
Tests install a `FakeClock` with `use()` and move it instead of sleeping.
"""

from __future__ import annotations

import math
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


# Timestamps from 1970 up to 9999: `isoformat` formats these itself; any other the way `datetime` does.
_FORMATTED_UP_TO = 253_402_300_800.0  # 10000-01-01T00:00:00Z
# The last whole second `isoformat` formatted, and its text (one tuple, replaced whole: thread-safe).
_last_second: tuple[int, str] = (-1, "")


def isoformat(ts: float | None) -> str | None:
    """RFC 3339 text for a stored timestamp to the millisecond (truncated), or None: what
    `datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")` gives, with `Z` for UTC. Every job
    view formats several, so the text of the second is kept from one call to the next."""
    global _last_second
    if ts is None:
        return None
    if not 0.0 <= ts < _FORMATTED_UP_TO:
        return _by_datetime(ts)
    # As `datetime.fromtimestamp` does: the fraction rounded half to even to the microsecond.
    fraction, whole = math.modf(ts)
    second, micro = int(whole), round(fraction * 1e6)
    if micro >= 1_000_000:
        second, micro = second + 1, micro - 1_000_000
    last = _last_second
    if last[0] != second:
        last = _last_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{last[1]}.{micro // 1000:03d}Z"


def _by_datetime(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
