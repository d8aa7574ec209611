"""Retrying a store write while the store is unavailable, within a bound.

A busy or briefly unreachable store must not throw finished work away, and a retry loop without a bound must
not hold a worker forever: each caller says how long it may keep trying (a lease's length: after that the
sweeper settles the job anyway) and how it pauses between tries. A late write is harmless, since every worker
write is fenced."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Engine

from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.jobstore import db

log = logging.getLogger(__name__)

T = TypeVar("T")
# A store writer's transaction, while the store is unavailable, is tried again after this (doubling) pause.
WRITE_RETRY_PAUSES = Backoff(0.05, 1.0)
# While the store stays unavailable, the log says so again every this many tries.
UNAVAILABLE_LOG_EVERY = 100


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


class PatientStore:
    """The store as one thread of a worker process writes to it (the store writer's rounds): a transaction
    retried while the store is unavailable, pausing 50 ms doubling to 1 s, for up to `give_up_after`
    seconds (a lease's length). A streak of tries that found the store unavailable is said in the log at its
    first try, every `UNAVAILABLE_LOG_EVERY` tries after it (a removed store file fails every try at once),
    and once when the store answers again; a read that found it unavailable counts in the same streak
    (`failed`, `answered`)."""

    def __init__(self, engine: Engine, give_up_after: float) -> None:
        self._engine = engine
        self._give_up_after = give_up_after
        self.tries = 0

    def transact(self, fn: Callable[..., T], *args: Any) -> T | None:
        """`fn(conn, *args)` in one write transaction, retried while the store is unavailable; None if it
        never went through."""
        try:
            written = retry_while_unavailable(
                partial(db.transact, self._engine, fn, *args),
                give_up_after=self._give_up_after,
                pauses=WRITE_RETRY_PAUSES,
                on_retry=self.failed,
            )
        except db.StoreUnavailable as exc:
            log.error("store unavailable, giving up: %s", exc)
            return None
        self.answered()
        return written

    def failed(self, exc: db.StoreUnavailable, pause: float = 0.0) -> None:
        """One more try found the store unavailable; the next is in `pause` seconds."""
        self.tries += 1
        if self.tries == 1 or self.tries % UNAVAILABLE_LOG_EVERY == 0:
            log.warning(
                "store unavailable, pausing claims (%d tries in a row, next in %.2fs): %s",
                self.tries,
                pause,
                exc,
            )

    def answered(self) -> None:
        """A try went through: a streak of unavailable tries, if any, is over."""
        if self.tries:
            log.info("the store answers again after %d tries", self.tries)
            self.tries = 0
