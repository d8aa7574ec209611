"""Backoff: how long to wait before trying again. Shared by the store (a failed attempt's retry, a webhook
delivery's retry), the consumer and the relays (reconnects, store outages), so it lives here, beneath all
of them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum


class Jitter(float, Enum):
    """How much of its ceiling a pause may fall short of, as the share of the ceiling it always keeps."""

    # Between half and all of the ceiling: pauses still grow from one attempt to the next (a job's
    # retries, reconnects, store outages).
    UPPER_HALF = 0.5
    # Anywhere from 0 to the ceiling: retries of many items that failed together spread out the most
    # (webhook deliveries to an endpoint that was down).
    FULL = 0.0


def compute_backoff(
    attempts: int,
    *,
    base: float,
    cap: float,
    rng: random.Random | None = None,
    jitter: Jitter = Jitter.UPPER_HALF,
) -> float:
    """Seconds to wait before the next attempt: exponential in `attempts` (>= 1) from `base`, capped at
    `cap`, jittered over the part of that ceiling that `jitter` leaves open (by default the upper half,
    so delays still grow from one attempt to the next). 0 before any attempt or without a base."""
    if attempts < 1 or base <= 0:
        return 0.0
    # The exponent is bounded so a large attempt count gives the cap, not an OverflowError.
    ceiling = min(cap, base * 2.0 ** min(attempts - 1, 64))
    draw = (rng or random).random()
    return ceiling * (jitter.value + (1.0 - jitter.value) * draw)


@dataclass(frozen=True)
class Backoff:
    """A retry policy: `compute_backoff` with a fixed base, cap, jitter and (in tests) source of jitter."""

    base: float
    cap: float
    rng: random.Random | None = None
    jitter: Jitter = Jitter.UPPER_HALF

    def seconds(self, attempts: int) -> float:
        return compute_backoff(attempts, base=self.base, cap=self.cap, rng=self.rng, jitter=self.jitter)


# Enough doublings to reach any cap from any base this project uses.
_AT_CAP = 64


@dataclass
class Streak:
    """Failures in a row (or empty polls, or lost connections) and the pause the next one earns: about
    `backoff.base` after the first, doubling with each one after it, never more than `backoff.cap`, jittered
    as `compute_backoff` is. `reset()` after a success starts over."""

    backoff: Backoff
    count: int = 0

    def failed(self) -> float:
        """One more failure in a row: the pause to take now."""
        self.count += 1
        return self.backoff.seconds(self.count)

    def at_cap(self) -> float:
        """Jump to the longest pause, and keep it for every failure until `reset()`."""
        self.count = max(self.count, _AT_CAP)
        return self.backoff.seconds(self.count)

    def reset(self) -> None:
        self.count = 0
