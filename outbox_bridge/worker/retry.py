"""Retrying a store write while the store is unavailable, within a bound.

A busy or briefly unreachable store must not throw finished work away, and a retry loop without a bound must
not hold a worker forever: each caller says how long it may keep trying (a lease's length: after that the
sweeper settles the job anyway) and how it pauses between tries. A late write is harmless, since every worker
write is fenced."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.jobstore import db

T = TypeVar("T")


def _never() -> bool:
    return False


def _quiet(_exc: db.StoreUnavailable, _pause: float) -> None:
    return None


def retry_while_unavailable(
    attempt: Callable[[], T],
    *,
    give_up_after: float,
    pauses: Backoff | None = None,
    lost: Callable[[], bool] = _never,
    on_retry: Callable[[db.StoreUnavailable, float], None] = _quiet,
) -> T:
    """What `attempt()` returns, calling it again while it raises `db.StoreUnavailable`, after
    `on_retry(exc, pause)` and that pause (growing as `pauses` says; no pause without). Raises the last
    `StoreUnavailable` once the next try would start `give_up_after` seconds or more after the first, or
    once `lost()` says the write no longer matters."""
    give_up_at = time.monotonic() + give_up_after
    streak = Streak(pauses) if pauses is not None else None
    while True:
        try:
            return attempt()
        except db.StoreUnavailable as exc:
            pause = streak.failed() if streak is not None else 0.0
            if lost() or time.monotonic() + pause >= give_up_at:
                raise
            on_retry(exc, pause)
            if pause > 0:
                time.sleep(pause)
