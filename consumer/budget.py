"""How many jobs a consumer claims: its threads' worth, plus, while jobs are short, as many more as its
threads will get through in about `AHEAD_SECONDS`.

Claiming ahead is what lets short jobs commit and claim many at a time (one SQLite write transaction per
round, whatever the round holds). It is also the price of unfairness: a claimed job, or a delivery waiting
to be claimed, waits for a thread of this consumer even if another consumer is idle, and a consumer that
stops (a stopped process, a long pause) keeps what the broker sent it until its connection is dropped. So
a consumer claims ahead only after `SHORT_RUNS_TO_BURST` jobs in a row ran shorter than half the
allowance, and stops the moment one runs longer than `AHEAD_SECONDS`.

The broker side follows: the consumer's own subscription prefetches `concurrency` deliveries; while it
claims ahead, a second subscription (the burst lane, see `consumer.link`) prefetches the rest.
"""

from __future__ import annotations

import threading

AHEAD_SECONDS = 0.05  # about how long a job claimed ahead may wait for a thread
MAX_AHEAD = 60  # claimed jobs waiting for a thread, at most
SHORT_RUNS_TO_BURST = 16
SMOOTHING = 0.2  # weight of the newest run time in the running average


class ClaimBudget:
    """The claim limit and prefetch of one consumer of `concurrency` threads. Thread-safe."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._run_seconds = AHEAD_SECONDS  # until jobs have run here, assume they are not short
        self._short_in_a_row = 0
        self._lock = threading.Lock()

    def ran(self, seconds: float) -> None:
        """A job's code returned after `seconds`."""
        with self._lock:
            self._run_seconds += SMOOTHING * (seconds - self._run_seconds)
            self._short_in_a_row = self._short_in_a_row + 1 if seconds < AHEAD_SECONDS / 2 else 0

    def bursting(self, longest_running: float = 0.0) -> bool:
        """Whether to claim ahead, given how long the longest job running now has run so far."""
        with self._lock:
            short = self._short_in_a_row >= SHORT_RUNS_TO_BURST
        return short and longest_running <= AHEAD_SECONDS

    def limit(self, longest_running: float = 0.0) -> int:
        """How many claimed, unfinished jobs the consumer may hold."""
        if not self.bursting(longest_running):
            return self.concurrency
        with self._lock:
            per_thread = AHEAD_SECONDS / max(self._run_seconds, 1e-6)
        return self.concurrency + min(MAX_AHEAD, int(self.concurrency * per_thread))

    @property
    def prefetch(self) -> int:
        """Unacked deliveries of the consumer's own subscription: one per thread."""
        return self.concurrency

    @property
    def burst_prefetch(self) -> int:
        """Unacked deliveries of the burst lane: with the consumer's own, two rounds of the largest limit
        (the deliveries being claimed, and the ones that wait for the next round)."""
        return 2 * (self.concurrency + MAX_AHEAD) - self.concurrency
