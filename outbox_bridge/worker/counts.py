"""What one worker process's store writer did, counted for its log line at exit and for the tests: the
claiming side's rounds, claims, refusals and jobs given back, the completing side's rounds and commits,
and what became of each job the process ran."""

from __future__ import annotations

import threading
from collections import Counter


class WriterCounts:
    """What one writer did, safe to read from any thread: rounds, claims, refusals and jobs given back
    (`add`), and what became of each job it ran (`outcomes`: a state's name, `fenced` or `released`)."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, **deltas: int) -> None:
        with self._lock:
            self._counts.update(deltas)

    def ended(self, outcome: str) -> None:
        with self._lock:
            self._outcomes[outcome] += 1

    def __getitem__(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))

    def outcomes(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._outcomes.items()))
