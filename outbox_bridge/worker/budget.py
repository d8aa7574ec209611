"""How many jobs a worker process holds claimed, in either mode.

A consumer: the broker sends it at most `prefetch` unacknowledged deliveries: its threads' worth plus a
bounded number ahead (`CONSUMER_PREFETCH`, by default `concurrency + min(MAX_AHEAD, AHEAD_PER_THREAD *
concurrency)`). That number is fixed for the life of a connection, and the consumer never gives a delivery
back while it runs: a quorum queue counts every return against its `x-delivery-limit` and dead-letters the
message past it, so pacing by giving deliveries back would, under an ordinary mix of short and long jobs,
strand runnable jobs in `jobs.dead`. Deliveries it cannot run yet wait, unacked, until a thread is free;
only a consumer that stops (SIGTERM) or dies returns what it holds. A baseline worker claims from the
table, and `prefetch` is simply the most it holds claimed.

Among what it may hold, a process claims its threads' worth, plus, while jobs are short, as many more as
its threads will get through in about `AHEAD_SECONDS`. Claiming ahead is what lets short jobs commit and
claim many at a time (one write transaction per round, whatever the round holds); holding a job claimed but
not running is what it costs. So a process claims ahead only after `SHORT_RUNS_TO_BURST` jobs in a row ran
shorter than half the allowance, and stops the moment one runs longer than `AHEAD_SECONDS`.
"""

from __future__ import annotations

import threading

AHEAD_SECONDS = 0.05  # about how long a job claimed ahead may wait for a thread
MAX_AHEAD = 60  # deliveries held beyond the threads' worth, at most
AHEAD_PER_THREAD = 16  # ... and at most this many per thread
SHORT_RUNS_TO_BURST = 16
SMOOTHING = 0.2  # weight of the newest run time in the running average


def default_prefetch(concurrency: int) -> int:
    """The deliveries a consumer of `concurrency` threads holds when `CONSUMER_PREFETCH` is not set."""
    return concurrency + min(MAX_AHEAD, AHEAD_PER_THREAD * concurrency)


class ClaimBudget:
    """The prefetch and the claim limit of one consumer of `concurrency` threads. Thread-safe."""

    def __init__(self, concurrency: int, prefetch: int = 0) -> None:
        self.concurrency = concurrency
        self.prefetch = max(prefetch, concurrency) if prefetch else default_prefetch(concurrency)
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
        return short and longest_running <= AHEAD_SECONDS and self.prefetch > self.concurrency

    def limit(self, longest_running: float = 0.0) -> int:
        """How many claimed, unfinished jobs the consumer may hold (never more than it is sent)."""
        if not self.bursting(longest_running):
            return self.concurrency
        with self._lock:
            per_thread = AHEAD_SECONDS / max(self._run_seconds, 1e-6)
        return self.concurrency + min(self.prefetch - self.concurrency, int(self.concurrency * per_thread))
