"""Backoff: how long to wait before trying again. Shared by the store (a failed attempt's retry), the
consumer and the relays (reconnects, store outages), so it lives here, beneath all of them."""

from __future__ import annotations

import random
from dataclasses import dataclass


def compute_backoff(attempts: int, *, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before the next attempt: exponential in `attempts` (>= 1), capped, with full jitter
    over the upper half so delays still grow from one attempt to the next."""
    if attempts < 1 or base <= 0:
        return 0.0
    # The exponent is bounded so a large attempt count gives the cap, not an OverflowError.
    ceiling = min(cap, base * 2.0 ** min(attempts - 1, 64))
    jitter = (rng or random).random()
    return ceiling * (0.5 + 0.5 * jitter)


@dataclass(frozen=True)
class Backoff:
    """A retry policy: `compute_backoff` with a fixed base, cap and (in tests) source of jitter."""

    base: float
    cap: float
    rng: random.Random | None = None

    def seconds(self, attempts: int) -> float:
        return compute_backoff(attempts, base=self.base, cap=self.cap, rng=self.rng)


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
