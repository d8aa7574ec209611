"""How often an idle poller asks the store again, and how periodic loops avoid running in lockstep."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

FIRST_IDLE_PAUSE = 0.001
MAX_IDLE_PAUSE = 0.064
JITTER = 0.25


def jittered(seconds: float, rng: random.Random, fraction: float = JITTER) -> float:
    """`seconds` moved by a random amount of at most `fraction` of itself, either way; never negative."""
    return max(0.0, seconds * (1.0 + fraction * (2.0 * rng.random() - 1.0)))


@dataclass
class IdleBackoff:
    """The pause before the next poll: `first` after work, doubling on each empty poll up to `cap`.

    Every pause is jittered, so processes that went idle together drift apart instead of polling the
    store at the same instants."""

    first: float = FIRST_IDLE_PAUSE
    cap: float = MAX_IDLE_PAUSE
    rng: random.Random = field(default_factory=random.Random)
    _next: float = field(init=False)

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.cap:
            raise ValueError(f"need 0 < first <= cap, got first={self.first} cap={self.cap}")
        self._next = self.first

    def worked(self) -> None:
        """A poll found work: the next empty poll waits `first` again."""
        self._next = self.first

    def idle(self) -> float:
        """A poll found nothing: the pause to take now (the pause after it doubles, up to `cap`)."""
        pause = self._next
        self._next = min(self.cap, self._next * 2)
        return jittered(pause, self.rng)

    def unavailable(self) -> float:
        """The store did not answer in time: pause the longest, and keep the long pause until work comes."""
        self._next = self.cap
        return jittered(self.cap, self.rng)
