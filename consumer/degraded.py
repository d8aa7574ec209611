"""Degraded mode: keep accepted work running while the broker is unreachable.

The choice: a consumer that has not been able to reach the broker for longer than
`DEGRADED_AFTER_SECONDS` (default 30; 0 turns degraded mode off) claims due jobs straight from the jobs
table, as the SQLite-only baseline does, up to its room, backing off between rounds that find none (20 ms
doubling to 1 s). The moment its connection is back it stops, and takes work from the broker again. The
claims are written by the consumer's own store writer, in its rounds (`worker.writer`): the claim, the
fence, the lease and the commit are the same, so a job is still run by one worker at a time, and
deliveries published for a job claimed this way are absorbed as duplicates later. While the broker is
reachable the consumer never reads the jobs table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.core.settings import Settings

log = logging.getLogger(__name__)

# How often the store writer looks at the broker link while degraded mode is off.
CHECK_INTERVAL = 0.2
IDLE_FIRST_PAUSE = 0.02
IDLE_MAX_PAUSE = 1.0


class DegradedMode:
    """Whether the consumer claims from the jobs table now: once the broker has been unreachable
    (`down_for`, seconds) for longer than `settings.degraded_after_seconds`, never when that is 0. The store
    writer asks before each round (`check`) and reports what the table gave it (`took`): the consumer's
    `worker.modes.TableSource`."""

    reads_first = False  # its rounds follow the pause that a round claiming nothing starts

    def __init__(self, settings: Settings, down_for: Callable[[], float]) -> None:
        self._after = settings.degraded_after_seconds
        self._down_for = down_for
        self._idle = Streak(Backoff(IDLE_FIRST_PAUSE, IDLE_MAX_PAUSE))
        self._pause = 0.0
        self.active = False
        self.claimed = 0  # jobs claimed from the table, in every episode
        self._claimed_before = 0

    @property
    def enabled(self) -> bool:
        return self._after > 0

    def check(self) -> bool:
        """Whether the next round claims from the table; says so in the log when that changes."""
        if not self.enabled:
            return False
        degraded = self._down_for() >= self._after
        if degraded and not self.active:
            self._claimed_before = self.claimed
            self._pause = 0.0
            log.warning(
                "broker unreachable for %.1fs: degraded mode, claiming from the jobs table", self._down_for()
            )
        elif self.active and not degraded:
            episode = self.claimed - self._claimed_before
            log.info("broker reachable again: leaving degraded mode after %d jobs from the table", episode)
        self.active = degraded
        return degraded

    def took(self, count: int, room: int) -> None:
        """A round claimed `count` jobs from the table (with `room` for more)."""
        self.claimed += count
        self._pause = 0.0 if count else self._idle.failed()
        if count:
            self._idle.reset()

    def wait_seconds(self) -> float | None:
        """How long the store writer may wait for other work before it looks again: the idle pause while
        degraded, `CHECK_INTERVAL` while not (None when degraded mode is off)."""
        if not self.enabled:
            return None
        return self._pause if self.active else CHECK_INTERVAL
