"""How many jobs a consumer claims: its threads' worth, plus, while jobs are short, as many more as its
threads will get through in about `AHEAD_SECONDS`.

Claiming ahead is what lets short jobs commit and claim many at a time (one SQLite write transaction per
round, whatever the round holds). It is also the price of unfairness: a claimed job waits for a thread of
this consumer even if another consumer is idle. So the allowance follows how long recent jobs ran, and
falls to nothing the moment a running job has taken longer than `AHEAD_SECONDS`.

The broker's prefetch is twice the largest claim limit (the deliveries being claimed, and the ones that
wait for the next round). It cannot follow the allowance down: quorum queues apply a consumer's prefetch
only when it starts consuming. So with long jobs, up to `prefetch` deliveries wait unclaimed at one
consumer (in the broker's view, delivered) while another may be idle: the usual prefetch trade-off.
"""

from __future__ import annotations

import threading

AHEAD_SECONDS = 0.05  # about how long a job claimed ahead may wait for a thread
MAX_AHEAD = 60  # claimed jobs waiting for a thread, at most
SMOOTHING = 0.2  # weight of the newest run time in the running average


class ClaimBudget:
    """The claim limit and prefetch of one consumer of `concurrency` threads. Thread-safe."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._run_seconds = AHEAD_SECONDS  # until jobs have run here, assume they are not short
        self._lock = threading.Lock()

    def ran(self, seconds: float) -> None:
        """A job's code returned after `seconds`."""
        with self._lock:
            self._run_seconds += SMOOTHING * (seconds - self._run_seconds)

    def limit(self, longest_running: float = 0.0) -> int:
        """How many claimed, unfinished jobs the consumer may hold, given how long its longest running job
        has run so far."""
        if longest_running > AHEAD_SECONDS:
            return self.concurrency
        with self._lock:
            per_thread = AHEAD_SECONDS / max(self._run_seconds, 1e-6)
        return self.concurrency + min(MAX_AHEAD, int(self.concurrency * per_thread))

    @property
    def prefetch(self) -> int:
        """Unacked deliveries to ask the broker for."""
        return 2 * (self.concurrency + MAX_AHEAD)
