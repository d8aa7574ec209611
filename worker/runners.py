"""The threads that run claimed jobs, in either worker mode: each takes the next claimed job, runs it with
`worker.attempt.run_attempt` and hands the outcome back to the process's store writer, which commits it.
They also keep the claim budget (`worker.budget`) informed of how long jobs run, and say how many more jobs
the process may claim now."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from core.settings import Settings
from handlers.base import JobError
from jobstore.records import Claim
from worker.attempt import AttemptOutcome, StoreContext, run_attempt
from worker.budget import ClaimBudget
from worker.inbox import STOP
from worker.lease import Held

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Running:
    """A job claimed in this process, from its claim until its outcome is committed. `delivery` is the
    broker delivery it came with (None when it was claimed from the table)."""

    claim: Claim
    held: Held
    delivery: Any = None
    started: float | None = None  # when a thread began running it (monotonic), until its code returned


@dataclass(frozen=True)
class Finished:
    running: Running
    outcome: AttemptOutcome
    at: float = field(default_factory=time.monotonic)  # when its code returned


class Runners:
    """`concurrency` threads running what `submit` gives them; each outcome goes to `finished(...)`."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        budget: ClaimBudget,
        finished: Callable[[Finished], None],
        *,
        concurrency: int,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._budget = budget
        self._finished = finished
        self._ready: queue.SimpleQueue[Any] = queue.SimpleQueue()  # Running | STOP
        self._unfinished: dict[int, Running] = {}  # submitted, code not returned yet
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, name=f"job-{n}", daemon=True) for n in range(concurrency)
        ]

    def start(self) -> Runners:
        for thread in self._threads:
            thread.start()
        return self

    def submit(self, running: Running) -> None:
        with self._lock:
            self._unfinished[id(running)] = running
        self._ready.put(running)

    def stop(self) -> None:
        """Each thread ends after the job it runs (jobs submitted before this still run first)."""
        for _ in self._threads:
            self._ready.put(STOP)

    def alive(self) -> int:
        return sum(thread.is_alive() for thread in self._threads)

    def room(self) -> int:
        """How many more jobs the process may claim now (`worker.budget`)."""
        longest, unfinished = self._load()
        return max(0, self._budget.limit(longest) - unfinished)

    def bursting(self) -> bool:
        """Whether the budget claims ahead now (jobs have been short, and none runs long)."""
        return self._budget.bursting(self._load()[0])

    def _load(self) -> tuple[float, int]:
        """How long the longest running job has run, and how many submitted jobs have not returned."""
        now = time.monotonic()
        with self._lock:
            began = [r.started for r in self._unfinished.values() if r.started is not None]
            unfinished = len(self._unfinished)
        return (now - min(began) if began else 0.0), unfinished

    def _loop(self) -> None:
        while (running := self._ready.get()) is not STOP:
            running.started = began = time.monotonic()
            outcome = self._run(running)
            self._budget.ran(time.monotonic() - began)
            with self._lock:
                self._unfinished.pop(id(running), None)
                running.started = None
            self._finished(Finished(running, outcome))

    def _run(self, running: Running) -> AttemptOutcome:
        if running.held.lost:  # handed back while it waited for a thread: another worker runs it
            return AttemptOutcome(lease_lost=True)
        try:
            return run_attempt(StoreContext(self._engine, self._settings, running.claim, running.held))
        except Exception as exc:  # outside the kind's own code (e.g. the execution log): retried later
            log.exception("job %s could not run", running.claim.job_id)
            return AttemptOutcome(error=JobError("worker_error", f"{type(exc).__name__}: {exc}"))
