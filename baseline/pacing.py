"""How often an idle poller asks the store again, and how periodic loops avoid running in lockstep."""

from __future__ import annotations

import random

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
