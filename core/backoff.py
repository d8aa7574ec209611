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
