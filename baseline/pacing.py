"""How often an idle baseline worker looks at the jobs table, and how periodic loops avoid running in
lockstep."""

from __future__ import annotations

import random
from collections.abc import Callable

from outbox_bridge.core.backoff import Backoff, Streak

# Ceilings: `compute_backoff` draws each pause between half and all of its ceiling, so the mean idle pause
# runs from about 1 ms after work to about 64 ms when idle (some 35 polls a second per idle process).
FIRST_IDLE_PAUSE = 0.00133
MAX_IDLE_PAUSE = 0.085
JITTER = 0.25


def jittered(seconds: float, rng: random.Random, fraction: float = JITTER) -> float:
    """`seconds` moved by a random amount of at most `fraction` of itself, either way; never negative."""
    return max(0.0, seconds * (1.0 + fraction * (2.0 * rng.random() - 1.0)))


def idle_pauses(rng: random.Random | None = None) -> Streak:
    """The pause before the next poll: at most `FIRST_IDLE_PAUSE` after work, doubling on each empty poll up
    to `MAX_IDLE_PAUSE` (`failed()`); the longest at once while the store is unavailable (`at_cap()`);
    `reset()` when a poll finds work. Every pause is jittered, so processes that went idle together drift
    apart instead of polling the store at the same instants."""
    return Streak(Backoff(FIRST_IDLE_PAUSE, MAX_IDLE_PAUSE, rng))


class Polling:
    """The baseline's table source for its store writer (`worker.modes.TableSource`): every round claims
    from the table. After a round that filled its room, the next follows at once (more may be due); after
    one that found fewer due jobs than room, the idle pause, doubling on each empty look; while the
    process listens for its store's notifications (`listening`, `baseline.listening`), at the longest pause
    at once, since each commit of due jobs wakes the writer and cuts any wait short. What no commit
    announces (a lease that ran out, a tenant back under its cap) is left to that pause. A look its pause
    started reads whether any job is due before it takes the write lock (`reads_first`)."""

    active = True
    reads_first = True

    def __init__(
        self, listening: Callable[[], bool] = lambda: False, rng: random.Random | None = None
    ) -> None:
        self.listening = listening
        self._pauses = idle_pauses(rng)
        self._pause = 0.0

    def check(self) -> bool:
        return True

    def took(self, count: int, room: int) -> None:
        if count and count >= room:
            self._pause = 0.0
            return
        if count:
            self._pauses.reset()
        self._pause = self._pauses.at_cap() if self.listening() else self._pauses.failed()

    def wait_seconds(self) -> float | None:
        return self._pause
