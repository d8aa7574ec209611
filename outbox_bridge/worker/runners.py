"""The executor: the jobs a worker process has claimed and the threads that run them, in either worker mode.
Each thread takes the next claimed job (begun by the producer, `worker.producer`), runs it with
`worker.attempt.run_attempt` and hands the outcome to the completer (`worker.completer`), which commits it
and then forgets the job. They also keep the claim budget (`worker.budget`) informed of how long jobs run,
and say how many more jobs the process may claim now."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.handlers.base import JobError
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.worker.attempt import AttemptOutcome, StoreContext, run_attempt
from outbox_bridge.worker.budget import ClaimBudget
from outbox_bridge.worker.lease import LeasedJob, LeaseKeeper
from outbox_bridge.worker.release import release_all

log = logging.getLogger(__name__)

IDLE_STEP = 0.02  # how often `wait_idle` looks


@dataclass(eq=False)
class Running:
    """A job claimed in this process, from its claim until its outcome is committed. `delivery` is the
    broker delivery it came with (None when it was claimed from the table)."""

    claim: Claim
    held: LeasedJob
    delivery: Any = None
    started: float | None = None  # when a thread began running it (monotonic), until its code returned
    traceparent: str | None = None  # the delivery's trace context: the run span's parent (`run_attempt`)
    ahead: bool = False  # claimed ahead of a free thread: the store shows it waiting for one, until marked
    began_at: float | None = None  # when a thread began running it (`clock.now`)


@dataclass(frozen=True)
class Finished:
    running: Running
    outcome: AttemptOutcome


class Runners:
    """`concurrency` threads running what `begin` gives them; each outcome goes to `finished(...)`. A job
    counts as claimed here from `begin` until the writer that committed its outcome calls `forget`."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        keeper: LeaseKeeper,
        budget: ClaimBudget,
        finished: Callable[[Finished], None],
        *,
        concurrency: int,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._keeper = keeper
        self._budget = budget
        self._finished = finished
        self._ready: collections.deque[Running] = collections.deque()  # claimed, waiting for a thread
        self._stops = 0  # threads asked to end once nothing is ready
        self._claimed: dict[str, Running] = {}  # by attempt id: claimed here, outcome not committed
        self._unfinished: dict[int, Running] = {}  # begun, code not returned yet
        self._lock = threading.Lock()
        self._readied = threading.Condition(self._lock)
        self._bursting = False  # the budget claimed ahead at the last `room`
        self.give_back_due = False  # claiming ahead stopped since: `give_back_waiting`
        self._threads = [
            threading.Thread(target=self._loop, name=f"job-{n}", daemon=True) for n in range(concurrency)
        ]

    def start(self) -> Runners:
        for thread in self._threads:
            thread.start()
        return self

    def begin(
        self, claim: Claim, delivery: Any = None, traceparent: str | None = None, *, ahead: bool = False
    ) -> Running:
        """Hold the claimed job's lease, count it as claimed here and queue it for a thread; its run span
        is a child of `traceparent` (the delivery's), else of the job's stored trace context. `ahead`: the
        claim recorded it as waiting for a thread (`began_running`)."""
        running = Running(claim, self._keeper.hold(claim), delivery, traceparent=traceparent, ahead=ahead)
        with self._lock:
            self._claimed[claim.attempt_id] = running
            self._unfinished[id(running)] = running
            self._ready.append(running)
            self._readied.notify()
        return running

    def _take_waiting(self) -> list[Running]:
        """Take back the claimed jobs still waiting for a thread, but for one per thread not running a job
        (the first in the order they were claimed): no thread starts them unless `_resume` gives them back."""
        with self._lock:
            running = sum(r.started is not None for r in self._unfinished.values())
            keep = max(0, len(self._threads) - running)
            taken = [self._ready.pop() for _ in range(max(0, len(self._ready) - keep))]
            for one in taken:
                self._unfinished.pop(id(one), None)
        taken.reverse()
        return taken

    def _resume(self, waiting: list[Running]) -> None:
        """Queue jobs `_take_waiting` took back for a thread again, first, in their order."""
        with self._lock:
            for running in reversed(waiting):
                self._unfinished[id(running)] = running
                self._ready.appendleft(running)
            self._readied.notify(len(waiting))

    def forget(self, running: Running) -> bool:
        """Stop counting `running` as claimed here (its outcome is committed, or left to its lease) and stop
        renewing its lease; False if it was already forgotten."""
        job_id = running.claim.job_id
        with self._lock:
            if self._claimed.pop(running.claim.attempt_id, None) is None:
                return False
            again = any(r.claim.job_id == job_id for r in self._claimed.values())
        if not again:  # the keeper tracks by job id: keep a newer claim of the same job renewed
            self._keeper.drop(job_id)
        return True

    def claimed(self) -> list[Running]:
        with self._lock:
            return list(self._claimed.values())

    def tenants(self) -> list[str]:
        """The tenant of each job claimed here."""
        with self._lock:
            return [running.claim.tenant for running in self._claimed.values()]

    def claimed_as(self, attempt_id: str) -> Running | None:
        with self._lock:
            return self._claimed.get(attempt_id)

    def in_flight(self) -> int:
        """Jobs claimed here whose outcome is not committed yet."""
        with self._lock:
            return len(self._claimed)

    def wait_idle(self, timeout: float, urgent: Callable[[], bool] = lambda: False) -> bool:
        """Wait until every job claimed here is forgotten, at most `timeout` seconds or until `urgent()`;
        whether none is left."""
        deadline = time.monotonic() + timeout
        while self.in_flight():
            if time.monotonic() >= deadline or urgent():
                return False
            time.sleep(IDLE_STEP)
        return True

    def stop(self) -> None:
        """Each thread ends after the job it runs (jobs submitted before this still run first)."""
        with self._lock:
            self._stops += len(self._threads)
            self._readied.notify_all()

    def alive(self) -> int:
        return sum(thread.is_alive() for thread in self._threads)

    def room(self) -> int:
        """How many more jobs the process may claim now (`worker.budget`). When claiming ahead stops (a job
        runs long), `give_back_due` says so until `give_back_waiting` runs."""
        longest, unfinished = self._load()
        bursting = self._budget.bursting(longest)
        if self._bursting and not bursting:
            self.give_back_due = True
        self._bursting = bursting
        return max(0, self._budget.limit(longest) - unfinished)

    @property
    def bursting(self) -> bool:
        """Whether the budget claimed ahead at the last `room` (jobs have been short, none ran long)."""
        return self._bursting

    def give_back_waiting(self) -> list[Running]:
        """Claiming ahead stopped: give back every claimed job still waiting for a thread but one per idle
        thread (`worker.release`: queued again, its attempt not counted, a new outbox row), so that a
        worker with a thread free runs it instead of it waiting here behind long jobs. Returns those given
        back (forgotten here); a job the store does not release waits for a thread here again. Call it
        outside any transaction of this process's."""
        self.give_back_due = False
        released = self._give_back(self._take_waiting())
        if released:
            log.info("claiming ahead stopped: %d waiting jobs given back", len(released))
        return released

    def give_back_over(self, most: int) -> list[Running]:
        """`TENANT_SHARE` started to apply (`worker.share`): give back the claimed jobs of each tenant that
        wait for a thread past its `most` (counting its jobs running here first, then its waiting ones in
        the order they were claimed), as `give_back_waiting` does. Returns those given back."""
        released = self._give_back(self._take_over(most))
        if released:
            log.info("another tenant has work: %d waiting jobs past the share given back", len(released))
        return released

    def _give_back(self, waiting: list[Running]) -> list[Running]:
        """Release `waiting` (taken off the ready queue) to the store; those it did not release wait for a
        thread here again, first, in their order."""
        if not waiting:
            return []
        by_attempt = {running.claim.attempt_id: running for running in waiting}
        released: list[Running] = []

        def forget(held: LeasedJob) -> None:
            running = by_attempt.pop(held.claim.attempt_id)
            if self.forget(running):
                released.append(running)

        handed = release_all(self._engine, [running.held for running in waiting], forget)
        self._resume([running for running in waiting if running.claim.attempt_id in by_attempt])
        log.debug("given back: %s", dict(handed))
        return released

    def waiting_over(self, most: int) -> bool:
        """Whether some tenant has claimed jobs waiting for a thread here past its `most` (`_take_over`)."""
        with self._lock:
            if not self._ready:
                return False
            counted = Counter(r.claim.tenant for r in self._unfinished.values() if r.started is not None)
            waiting = Counter(r.claim.tenant for r in self._ready)
        return any(counted[tenant] + count > most for tenant, count in waiting.items())

    def _take_over(self, most: int) -> list[Running]:
        """Take back the claimed jobs waiting for a thread past their tenant's `most` (`give_back_over`)."""
        with self._lock:
            kept = Counter(r.claim.tenant for r in self._unfinished.values() if r.started is not None)
            keep: list[Running] = []
            taken: list[Running] = []
            for running in self._ready:
                tenant = running.claim.tenant
                if kept[tenant] < most:
                    kept[tenant] += 1
                    keep.append(running)
                else:
                    taken.append(running)
            if taken:
                self._ready.clear()
                self._ready.extend(keep)
                for one in taken:
                    self._unfinished.pop(id(one), None)
        return taken

    def idle(self) -> int:
        """Threads that would start a job claimed now at once: neither running one nor about to."""
        with self._lock:
            running = sum(r.started is not None for r in self._unfinished.values())
            return max(0, len(self._threads) - running - len(self._ready))

    def unmarked(self) -> bool:
        """Whether a job claimed ahead is still shown waiting for a thread (`began_running`)."""
        with self._lock:
            return any(r.ahead for r in self._unfinished.values())

    def began_running(self, after: float) -> list[Running]:
        """The jobs claimed ahead whose thread began running them at least `after` seconds ago and is still
        at it: the store is to show them started (`claiming.mark_running`; then `marked`). A job that ends
        sooner is never marked: its outcome is the only write it costs."""
        since = time.monotonic() - after
        with self._lock:
            return [
                r
                for r in self._unfinished.values()
                if r.ahead and r.started is not None and r.started <= since
            ]

    def marked(self, runnings: list[Running]) -> None:
        """The store shows `runnings` started."""
        with self._lock:
            for running in runnings:
                running.ahead = False

    def _load(self) -> tuple[float, int]:
        """How long the longest running job has run, and how many submitted jobs have not returned."""
        now = time.monotonic()
        with self._lock:
            began = [r.started for r in self._unfinished.values() if r.started is not None]
            unfinished = len(self._unfinished)
        return (now - min(began) if began else 0.0), unfinished

    def _next(self) -> Running | None:
        """The next claimed job for this thread (marked started), or None when the thread should end."""
        with self._lock:
            while not self._ready and not self._stops:
                self._readied.wait()
            if not self._ready:
                self._stops -= 1
                return None
            running = self._ready.popleft()
            running.started = time.monotonic()
            running.began_at = clock.now()
            return running

    def _loop(self) -> None:
        while (running := self._next()) is not None:
            began = running.started
            assert began is not None
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
            context = StoreContext(self._engine, self._settings, running.claim, running.held)
            return run_attempt(context, parent=running.traceparent)
        except Exception as exc:  # outside the kind's own code (e.g. the execution log): retried later
            log.exception("job %s could not run", running.claim.job_id)
            return AttemptOutcome(error=JobError("worker_error", f"{type(exc).__name__}: {exc}"))
