"""The claiming threads: each polls the jobs table for the oldest claimable job and runs it to its committed
outcome with the shared worker runtime (`worker.attempt.run_attempt`, then the completer,
`worker.commit.commit_outcomes`, under the fence), so the baseline runs exactly what the broker consumers
run."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

from sqlalchemy import Connection, Engine

from baseline.listening import Nudges
from baseline.pacing import idle_pauses
from core import clock
from core.backoff import Backoff
from core.settings import Settings
from jobstore import claiming, db
from jobstore.records import Claim
from jobstore.states import State
from worker.attempt import AttemptOutcome, StoreContext, discard_uncommitted, run_attempt
from worker.commit import backoff_of, commit_outcomes
from worker.handback import Handback, hand_back, hand_back_all
from worker.lease import Held, LeaseKeeper
from worker.patience import retry_while_unavailable
from worker.polling import claim_next

log = logging.getLogger(__name__)

JOIN_STEP = 0.1
UNAVAILABLE_LOG_EVERY = 100  # at the longest idle pause, a warning every few seconds per thread


def _say_unavailable(worker: str, tries: int, exc: db.StoreUnavailable) -> None:
    """Log the first of `tries` in a row that found the store unavailable, and every so often after it:
    a removed store file fails every try at once."""
    if tries == 1 or tries % UNAVAILABLE_LOG_EVERY == 0:
        log.warning("%s: store unavailable, pausing claims (%d tries in a row): %s", worker, tries, exc)


def worker_names(concurrency: int) -> list[str]:
    """Names that say where a claim came from: host, process id and thread number."""
    prefix = f"baseline@{socket.gethostname()}:{os.getpid()}"
    return [f"{prefix}/{n}" for n in range(concurrency)]


class OutcomeCounts:
    """Jobs this process ran, by what became of them; safe to add to from any thread."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, outcome: str) -> None:
        with self._lock:
            self._counts[outcome] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))


class ClaimPool:
    """`concurrency` threads that claim and run jobs until `stopping` is set.

    A thread commits a job's outcome and claims its next job in one transaction (each write transaction
    waits for its write turn in `db.transact`, see `jobstore.turns`). It checks `stopping` before each
    claim and again after it: a claim that lands after the stop is given back at once instead of being run.
    A busy or unreachable store pauses a thread; it never ends it."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        keeper: LeaseKeeper,
        *,
        concurrency: int,
        stopping: threading.Event,
        nudges: Nudges | None = None,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._keeper = keeper
        self._stopping = stopping
        self._nudges = nudges or Nudges()
        self.tally = OutcomeCounts()
        self._threads = [
            threading.Thread(target=self._loop, args=(name,), name=f"claim-{n}", daemon=True)
            for n, name in enumerate(worker_names(concurrency))
        ]

    def start(self) -> ClaimPool:
        for thread in self._threads:
            thread.start()
        return self

    def running(self) -> int:
        """How many threads have not ended yet (after a stop: how many are still running a job)."""
        return sum(thread.is_alive() for thread in self._threads)

    def join(self, timeout: float, interrupted: Callable[[], bool] = lambda: False) -> bool:
        """Wait until every thread has ended, at most `timeout` seconds or until `interrupted()`; returns
        whether they all ended."""
        deadline = time.monotonic() + timeout
        while not interrupted():
            alive = [thread for thread in self._threads if thread.is_alive()]
            left = deadline - time.monotonic()
            if not alive or left <= 0:
                break
            alive[0].join(min(JOIN_STEP, left))
        return self.running() == 0

    def hand_back_held(self) -> Counter[Handback]:
        """Give back every job still held (`worker.handback.hand_back_all`): a released job's running
        attempt stops at its next check without writing anything."""
        return hand_back_all(self._engine, self._keeper.held())

    def _loop(self, worker: str) -> None:
        backoff = idle_pauses()
        claim: Claim | None = None
        unavailable = 0  # store calls in a row that found it unavailable
        while claim is not None or not self._stopping.is_set():
            try:
                claim = self._run(claim, worker) if claim is not None else self._claim(worker)
            except db.StoreUnavailable as exc:
                unavailable += 1
                _say_unavailable(worker, unavailable, exc)
                claim = None
                self._stopping.wait(backoff.at_cap())
                continue
            except Exception:  # a bug must not silently cost the process a thread
                log.exception("%s: unexpected error; pausing", worker)
                claim = None
                self._stopping.wait(backoff.at_cap())
                continue
            if unavailable:
                log.info("%s: the store answers again after %d tries", worker, unavailable)
                unavailable = 0
            if claim is None:
                self._idle(backoff.failed())
            else:
                backoff.reset()
                claim = self._unless_stopping(claim)

    def _idle(self, pause: float) -> None:
        """Wait `pause` seconds before polling again, or less when nudged (a commit rang) or stopping."""
        if not self._stopping.is_set():
            self._nudges.wait(pause)

    def _claim(self, worker: str) -> Claim | None:
        return db.transact(self._engine, claim_next, worker, self._settings.lease_seconds)

    def _unless_stopping(self, claim: Claim) -> Claim | None:
        """The claim, or None after giving it back when the stop came while it was being taken."""
        if not self._stopping.is_set():
            return claim
        result = hand_back(self._engine, claim)
        log.info("job %s epoch %d: claimed while stopping: %s", claim.job_id, claim.epoch, result.value)
        self.tally.add(result.value)
        return None

    def _run(self, claim: Claim, worker: str) -> Claim | None:
        """Run `claim` with the shared worker runtime and commit its outcome; returns the next claim, taken
        in the same transaction (see `commit_and_claim_next`), or None."""
        held = self._keeper.hold(claim)
        try:
            outcome = run_attempt(StoreContext(self._engine, self._settings, claim, held))
            state, next_claim = self._commit(claim, outcome, held, worker)
            discard_uncommitted(self._settings, claim, outcome, state)
        except db.StoreUnavailable as exc:
            log.warning(
                "job %s epoch %d: outcome not committed (%s); it runs again after its lease expires",
                claim.job_id,
                claim.epoch,
                exc,
            )
            self.tally.add("uncommitted")
            return None
        finally:
            self._keeper.drop(claim.job_id)
        self.tally.add(_outcome_name(held, state))
        return next_claim

    def _commit(
        self, claim: Claim, outcome: AttemptOutcome, held: Held, worker: str
    ) -> tuple[State | None, Claim | None]:
        """Commit the outcome under its fence (and claim the next job unless stopping). A busy store does
        not throw finished work away: the commit is tried again (the fence makes a late one harmless) until
        it lands, the lease is known lost, or `lease_seconds` have passed; then `StoreUnavailable`."""
        backoff = backoff_of(self._settings)

        def attempt() -> tuple[State | None, Claim | None]:
            next_worker = None if self._stopping.is_set() else worker
            return db.transact(
                self._engine,
                commit_and_claim_next,
                claim,
                outcome,
                backoff,
                next_worker=next_worker,
                lease_seconds=self._settings.lease_seconds,
            )

        def say_delayed(exc: db.StoreUnavailable, _pause: float) -> None:
            log.warning("job %s epoch %d: commit delayed (%s); trying again", claim.job_id, claim.epoch, exc)

        return retry_while_unavailable(
            attempt, give_up_after=self._settings.lease_seconds, lost=lambda: held.lost, on_retry=say_delayed
        )


def _outcome_name(held: Held, state: State | None) -> str:
    if state is not None:
        return state.value
    return Handback.RELEASED.value if held.handed_back else "fenced"


def commit_and_claim_next(
    conn: Connection,
    claim: Claim,
    outcome: AttemptOutcome,
    backoff: Backoff,
    *,
    next_worker: str | None,
    lease_seconds: float,
) -> tuple[State | None, Claim | None]:
    """Commit `outcome` under its fence (None when fenced out: nothing written) and, when `next_worker` is
    given, claim the next job for it in the same transaction: one write transaction per job, not two."""
    now = clock.now()
    [state] = commit_outcomes(conn, [(claim, outcome)], now, backoff)
    if next_worker is None:
        return state, None
    return state, claiming.claim_next(conn, next_worker, now, lease_seconds)
