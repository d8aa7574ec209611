"""Claim, run, commit, then ack: the consumer's work, on threads that never touch the broker connection.

Deliveries are claimed in batches (one transaction for every delivery waiting), run on a pool of worker
threads, and their outcomes are group-committed: one thread drains every outcome that finished meanwhile
and writes them all in one transaction under their fences. Only after that commit are their deliveries
acked. A refused claim (finished, leased by a live worker, waiting out a backoff, waiting for the sweeper,
or unknown) is acked without running: it is a duplicate, or a retry whose own outbox row delivers it later.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection, Engine

from consumer.link import Delivery
from handlers.base import JobError
from handlers.runner import AttemptOutcome, Held, LeaseKeeper, StoreContext, commit_outcome, run_attempt
from jobstore import clock, db, faults
from jobstore import jobs as store
from jobstore.errors import Fenced
from jobstore.records import Claim
from jobstore.settings import Settings
from jobstore.states import State

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP: Any = object()
MAX_BATCH = 512


class Acker(Protocol):
    def ack(self, deliveries: Sequence[Delivery]) -> int: ...

    def requeue(self, deliveries: Sequence[Delivery]) -> int: ...


@dataclass(eq=False)
class Running:
    """A claimed job in this process; `delivery` is None when it was claimed from the table (degraded)."""

    claim: Claim
    held: Held
    delivery: Delivery | None


@dataclass(frozen=True)
class Finished:
    running: Running
    outcome: AttemptOutcome


def claim_all(
    conn: Connection, job_ids: Sequence[str], worker: str, lease_seconds: float
) -> list[store.ClaimResult]:
    """Claim each job in the caller's transaction; a second delivery of one job sees it leased."""
    now = clock.now()
    return [store.claim(conn, job_id, worker, now, lease_seconds) for job_id in job_ids]


def commit_all(conn: Connection, finished: Sequence[Finished], backoff: store.Backoff) -> list[State | None]:
    """Commit every outcome under its own fence in the caller's transaction; a fenced one writes nothing
    (None) and does not disturb the others."""
    now = clock.now()
    return [commit_outcome(conn, f.running.claim, f.outcome, now, backoff) for f in finished]


def release_one(conn: Connection, claim: Claim) -> None:
    store.release(conn, claim.job_id, claim.epoch, claim.attempt_id, clock.now())


def take_batch(source: queue.SimpleQueue[Any], limit: int = MAX_BATCH) -> list[Any] | None:
    """Wait for one item, then take whatever else is already waiting (up to `limit`); None at STOP."""
    first = source.get()
    if first is STOP:
        return None
    batch = [first]
    while len(batch) < limit:
        try:
            item = source.get_nowait()
        except queue.Empty:
            break
        if item is STOP:
            source.put(STOP)  # seen again by the next take, after this batch is handled
            break
        batch.append(item)
    return batch


class Pipeline:
    """The claimer, the worker pool and the committer of one consumer process.

    Promises: a delivery is acked only after its job's outcome is committed or its claim was refused;
    every delivery is settled at most once; a job whose commit never reaches the store is not acked
    (its lease runs out and the sweeper settles it)."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        keeper: LeaseKeeper,
        acker: Acker,
        *,
        concurrency: int,
        worker: str,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._keeper = keeper
        self._acker = acker
        self._worker = worker
        self._backoff = store.Backoff(settings.backoff_base_seconds, settings.backoff_max_seconds)
        self._incoming: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._finished: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._running: dict[str, Running] = {}
        self._lock = threading.Lock()
        self._accepting = True
        self.counts: Counter[str] = Counter()
        self._claimer = threading.Thread(target=self._claim_loop, name="claimer", daemon=True)
        self._committer = threading.Thread(target=self._commit_loop, name="committer", daemon=True)
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"job-{i}", daemon=True) for i in range(concurrency)
        ]

    def start(self) -> Pipeline:
        for thread in (self._claimer, self._committer, *self._workers):
            thread.start()
        return self

    def offer(self, delivery: Delivery) -> None:
        """Queue a delivery for claiming (called on the broker link's thread; never blocks)."""
        self._incoming.put(delivery)

    def begin(self, claim: Claim, delivery: Delivery | None) -> Running:
        """Hold the claimed job's lease and queue it for a worker thread."""
        running = Running(claim, self._keeper.hold(claim), delivery)
        with self._lock:
            self._running[claim.attempt_id] = running
        self._ready.put(running)
        return running

    def in_flight(self) -> int:
        """Jobs claimed here whose outcome is not committed yet."""
        with self._lock:
            return len(self._running)

    def running(self) -> list[Running]:
        with self._lock:
            return list(self._running.values())

    def _count(self, **deltas: int) -> None:
        with self._lock:
            self.counts.update(deltas)

    # Claiming.

    def _claim_loop(self) -> None:
        while (batch := take_batch(self._incoming)) is not None:
            if not self._accepting:
                self._acker.requeue(batch)
                continue
            try:
                self._claim_batch(batch)
            except Exception:
                log.exception("claiming %d deliveries failed; giving them back", len(batch))
                self._acker.requeue(batch)

    def _claim_batch(self, batch: list[Delivery]) -> None:
        job_ids = [d.job_id for d in batch]
        results = self._patiently(claim_all, job_ids, self._worker, self._settings.lease_seconds)
        if results is None:
            self._acker.requeue(batch)
            return
        refused = []
        for delivery, result in zip(batch, results, strict=True):
            if result.claim is None:
                log.info("job %s not run (%s): delivery acked", delivery.job_id, result.refusal.value)
                refused.append(delivery)
                continue
            faults.hit("consumer.after_claim")
            self.begin(result.claim, delivery)
        self._count(claim_transactions=1, claimed=len(batch) - len(refused), refused=len(refused))
        self._acker.ack(refused)

    def stop_claiming(self, timeout: float) -> None:
        """Claim nothing more: deliveries not yet claimed go back to the queue. Waits for a claim in
        progress, so nothing starts running after this returns."""
        self._accepting = False
        self._incoming.put(STOP)
        self._claimer.join(timeout)

    # Running.

    def _work_loop(self) -> None:
        while (running := self._ready.get()) is not STOP:
            self._finished.put(Finished(running, self._run(running)))

    def _run(self, running: Running) -> AttemptOutcome:
        try:
            return run_attempt(StoreContext(self._engine, self._settings, running.claim, running.held))
        except Exception as exc:  # outside the kind's own code (e.g. the execution log): retried later
            log.exception("job %s could not run", running.claim.job_id)
            return AttemptOutcome(error=JobError("worker_error", f"{type(exc).__name__}: {exc}"))

    # Committing.

    def _commit_loop(self) -> None:
        while (batch := take_batch(self._finished)) is not None:
            try:
                self._commit_batch(batch)
            except Exception:
                log.exception("committing %d outcomes failed; their leases will run out", len(batch))
                self._end(batch, acked=False)

    def _commit_batch(self, batch: list[Finished]) -> None:
        states = self._patiently(commit_all, batch, self._backoff)
        if states is None:
            log.error("%d outcomes never reached the store; their leases will run out", len(batch))
            self._end(batch, acked=False)
            return
        faults.hit("consumer.after_commit")
        fenced = sum(state is None for state in states)
        self._count(commit_transactions=1, committed=len(batch) - fenced, fenced=fenced)
        if fenced:
            log.info("%d of %d outcomes fenced out (a newer epoch or an expired lease)", fenced, len(batch))
        self._end(batch, acked=True)

    def _end(self, batch: Sequence[Finished], *, acked: bool) -> None:
        deliveries = [f.running.delivery for f in batch if self._forget(f.running)]
        settled = [d for d in deliveries if d is not None]
        if acked:
            self._acker.ack(settled)
        else:
            self._acker.requeue(settled)

    def _forget(self, running: Running) -> bool:
        """Stop tracking `running`; False if it was already forgotten (its delivery is settled)."""
        job_id = running.claim.job_id
        with self._lock:
            if self._running.pop(running.claim.attempt_id, None) is None:
                return False
            again = any(r.claim.job_id == job_id for r in self._running.values())
        if not again:  # the keeper tracks by job id: keep a newer claim of the same job renewed
            self._keeper.drop(job_id)
        return True

    def _patiently(self, fn: Callable[..., T], *args: Any) -> T | None:
        """One write transaction, retried while the store is unavailable for up to a lease's length;
        None if it never went through."""
        give_up_at = time.monotonic() + self._settings.lease_seconds
        pause = 0.05
        while True:
            try:
                return db.transact(self._engine, fn, *args)
            except db.StoreUnavailable as exc:
                if time.monotonic() + pause > give_up_at:
                    log.error("store unavailable, giving up: %s", exc)
                    return None
                log.warning("store unavailable, retrying in %.2fs: %s", pause, exc)
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    # Shutting down.

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every claimed job's outcome is committed; False if some still run at `timeout`."""
        deadline = time.monotonic() + timeout
        while self.in_flight():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def release_running(self) -> list[Running]:
        """Give every job still running back to the queue (`jobs.release`: queued again with a new outbox
        row) and ack its delivery. Returns the jobs the store refused to release: those started an external
        effect and must be finished, not repeated (or their lease is already gone)."""
        kept: list[Running] = []
        released: list[Delivery] = []
        for running in self.running():
            try:
                db.transact(self._engine, release_one, running.claim)
            except (Fenced, db.StoreUnavailable) as exc:
                log.info("job %s not released (%s): letting it finish", running.claim.job_id, exc)
                kept.append(running)
                continue
            running.held.lost = True  # its code stops at the next check; what it returns is fenced out
            if self._forget(running) and running.delivery is not None:
                released.append(running.delivery)
            log.info("job %s released: queued again for another worker", running.claim.job_id)
        self._acker.ack(released)
        return kept

    def close(self, timeout: float = 5.0) -> None:
        """Stop the threads once the outcomes already finished are committed and acked."""
        for _ in self._workers:
            self._ready.put(STOP)
        self._finished.put(STOP)
        self._committer.join(timeout)
