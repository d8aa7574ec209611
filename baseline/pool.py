"""The claiming threads: each polls the jobs table for the oldest claimable job and runs it to its committed
outcome with the shared runner, so the baseline runs exactly what the broker consumers run."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

from sqlalchemy import Engine

from baseline.handback import Handback, hand_back
from baseline.pacing import IdleBackoff
from handlers.runner import LeaseKeeper, execute
from jobstore import clock, db
from jobstore import jobs as store
from jobstore.records import Claim
from jobstore.settings import Settings

log = logging.getLogger(__name__)

JOIN_STEP = 0.1


def worker_names(concurrency: int) -> list[str]:
    """Names that say where a claim came from: host, process id and thread number."""
    prefix = f"baseline@{socket.gethostname()}:{os.getpid()}"
    return [f"{prefix}/{n}" for n in range(concurrency)]


class Tally:
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

    A thread checks `stopping` before each claim and again after it: a claim that lands after the stop is
    given back at once instead of being run. A busy or unreachable store pauses a thread; it never ends it."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        keeper: LeaseKeeper,
        *,
        concurrency: int,
        stopping: threading.Event,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._keeper = keeper
        self._stopping = stopping
        self.tally = Tally()
        self._released: set[str] = set()
        self._lock = threading.Lock()
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
        """Give back every job still held (see `hand_back`); a released job's running attempt is told its
        lease is gone, so it stops at its next check without writing anything."""
        results: Counter[Handback] = Counter()
        for held in self._keeper.held():
            with self._lock:
                self._released.add(held.claim.job_id)
            result = hand_back(self._engine, held.claim)
            if result is Handback.RELEASED:
                held.lost = True
            else:
                with self._lock:
                    self._released.discard(held.claim.job_id)
            log.info("job %s epoch %d: %s", held.claim.job_id, held.claim.epoch, result.value)
            results[result] += 1
        return results

    def _loop(self, worker: str) -> None:
        backoff = IdleBackoff()
        while not self._stopping.is_set():
            try:
                pause = self._poll(worker, backoff)
            except Exception:  # a bug must not silently cost the process a thread
                log.exception("%s: unexpected error; pausing", worker)
                pause = backoff.unavailable()
            if pause:
                self._stopping.wait(pause)

    def _poll(self, worker: str, backoff: IdleBackoff) -> float:
        """Claim and run one job; returns how long to pause before the next poll."""
        lease = self._settings.lease_seconds
        try:
            claim = db.transact(self._engine, store.claim_next, worker, clock.now(), lease)
        except db.StoreUnavailable as exc:
            log.warning("%s: store unavailable, pausing claims: %s", worker, exc)
            return backoff.unavailable()
        if claim is None:
            return backoff.idle()
        backoff.worked()
        if self._stopping.is_set():
            result = hand_back(self._engine, claim)
            log.info("job %s epoch %d: claimed while stopping: %s", claim.job_id, claim.epoch, result.value)
            self.tally.add(result.value)
            return 0.0
        self._run(claim)
        return 0.0

    def _run(self, claim: Claim) -> None:
        try:
            state = execute(self._engine, self._settings, self._keeper, claim)
        except db.StoreUnavailable as exc:
            log.warning(
                "job %s epoch %d: outcome not committed (%s); it runs again after its lease expires",
                claim.job_id,
                claim.epoch,
                exc,
            )
            self.tally.add("uncommitted")
            return
        if state is not None:
            self.tally.add(state.value)
            return
        with self._lock:
            released = claim.job_id in self._released
        self.tally.add(Handback.RELEASED.value if released else "fenced")
