"""The baseline's claiming and running: one claimer thread takes due jobs from the table in batches and
group-commits what finished; `concurrency` runner threads run the claimed jobs with the shared worker
runtime (`worker.attempt.run_attempt`), so the baseline runs exactly what the broker consumers run.

Each round is ONE write transaction: the outcomes that finished since the last round, each under its own
fence (`worker.commit.commit_outcomes`, the consumers' completer), then claims of up to `room` due jobs,
oldest first (`claiming.claim_due`). The room is the threads' worth, plus, while jobs are short, as many
more as the threads get through in about `AHEAD_SECONDS` (`worker.budget.ClaimBudget`, as a consumer
claims ahead). Under load a round therefore commits and claims many jobs at a time; at a light load it is
one job's claim, then its outcome.

When claiming ahead stops (a job runs long), the jobs claimed ahead that still wait for a thread are given
back to the table (`worker.runners.Runners.give_back_waiting`), so a worker with a thread free claims them.

Pacing: while every room is taken, the claimer waits for a job to finish (while claiming ahead, at most
`AHEAD_SECONDS`, to notice one that runs long); after a round that found fewer due
jobs than room, it polls again after `FIRST_IDLE_PAUSE`, doubling on each empty poll up to `MAX_IDLE_PAUSE`
(`baseline.pacing`); while the process listens on its doorbell (`baseline.listening`), at the longest
pause at once, since each commit of due jobs rings it and cuts any wait short. A poll its pause started
reads whether any job is due before it takes the write lock (`claiming.any_due`). A busy or unreachable
store pauses the claimer at the longest pause; it never ends it, and outcomes it could not commit are
committed by a later round (the fence makes a late one harmless).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Engine

from outbox_bridge.baseline.pacing import idle_pauses
from outbox_bridge.core import clock
from outbox_bridge.core.backoff import Backoff, Streak
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db
from outbox_bridge.jobstore.limits import Limits
from outbox_bridge.jobstore.records import Claim
from outbox_bridge.jobstore.states import State
from outbox_bridge.jobstore.tenantcap import Share
from outbox_bridge.telemetry.instruments import FENCED_WRITES
from outbox_bridge.worker.attempt import discard_uncommitted
from outbox_bridge.worker.budget import AHEAD_SECONDS, ClaimBudget
from outbox_bridge.worker.commit import backoff_of, commit_outcomes
from outbox_bridge.worker.inbox import STOP, take_batch
from outbox_bridge.worker.lease import Held, LeaseKeeper
from outbox_bridge.worker.polling import any_due, claim_due
from outbox_bridge.worker.release import Release, release, release_all
from outbox_bridge.worker.runners import Finished, Runners
from outbox_bridge.worker.share import TenantShare

log = logging.getLogger(__name__)

UNAVAILABLE_LOG_EVERY = 100  # at the longest idle pause, a warning every few seconds
NUDGE: Any = object()


def _say_unavailable(tries: int, exc: db.StoreUnavailable) -> None:
    """Log the first of `tries` in a row that found the store unavailable, and every so often after it:
    a removed store file fails every try at once."""
    if tries == 1 or tries % UNAVAILABLE_LOG_EVERY == 0:
        log.warning("store unavailable, pausing claims (%d tries in a row): %s", tries, exc)


def worker_name() -> str:
    """The name leases are held under: host and process id."""
    return f"baseline@{socket.gethostname()}:{os.getpid()}"


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
    """The claimer and the runners of one baseline process, until `stopping` is set and what it claimed is
    committed. The claimer checks `stopping` under the round lock: a claim that lands after the stop is
    given back at once instead of being run."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        keeper: LeaseKeeper,
        *,
        concurrency: int,
        stopping: threading.Event,
        budget: ClaimBudget | None = None,
    ) -> None:
        self._engine = engine
        self._settings = settings
        self._keeper = keeper
        self._stopping = stopping
        self._backoff = backoff_of(settings)
        self._limits = Limits.of(settings)
        self._worker = worker_name()
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()  # Finished | NUDGE | STOP
        self._runners = Runners(
            engine,
            settings,
            keeper,
            budget or ClaimBudget(concurrency),
            self._inbox.put,
            concurrency=concurrency,
        )
        self._share = TenantShare(settings.tenant_share, concurrency)
        self._outcomes: list[Finished] = []  # finished, waiting for the next round to commit them
        self._round = threading.Lock()
        # Whether the process listens on its store's bell now (`baseline.listening`); set by the process.
        self.bell_open: Callable[[], bool] = lambda: False
        self.counts = OutcomeCounts()
        self._claimer = threading.Thread(target=self._claim_loop, name="claimer", daemon=True)

    @property
    def worker(self) -> str:
        """The name this pool's claims write as the lease owner."""
        return self._worker

    def start(self) -> ClaimPool:
        self._runners.start()
        self._claimer.start()
        return self

    def nudge(self) -> None:
        """Poll now: a commit announced due jobs, or the process is stopping (safe from any thread)."""
        self._inbox.put(NUDGE)

    def stop_claiming(self) -> None:
        """Claim nothing more; returns once a round in progress has ended, so no job starts after it."""
        self._stopping.set()
        self.nudge()
        with self._round:
            pass

    def in_flight(self) -> int:
        """Jobs claimed here whose outcome is not committed yet."""
        return self._runners.in_flight()

    def running(self) -> int:
        """How many of the claimer and runner threads have not ended yet."""
        return self._claimer.is_alive() + self._runners.alive()

    def wait_idle(self, timeout: float, urgent: Callable[[], bool] = lambda: False) -> bool:
        """Wait until every claimed job's outcome is committed (or given up), at most `timeout` seconds or
        until `urgent()`; whether none is left."""
        return self._runners.wait_idle(timeout, urgent)

    def release_held(self) -> Counter[Release]:
        """Give back every job still held (`worker.release.release_all`): a released job's running
        attempt stops at its next check, and one not started yet does not start; neither writes anything."""
        return release_all(self._engine, self._keeper.held())

    def close(self, timeout: float = 5.0) -> None:
        """End the threads once the outcomes already finished are committed."""
        self._runners.stop()
        self._inbox.put(STOP)
        self._claimer.join(timeout)

    # Claiming and committing.

    def _claim_loop(self) -> None:
        pauses = idle_pauses()
        unavailable = 0  # rounds in a row that found the store unavailable
        wait: float | None = 0.0
        while (batch := take_batch(self._inbox, timeout=wait)) is not None:
            self._outcomes += [item for item in batch if isinstance(item, Finished)]
            try:
                with self._round:
                    room, claimed = self._write_round(polled=not batch)
                    if self._runners.give_back_due and not self._stopping.is_set():
                        self._runners.give_back_waiting()  # for a worker with a thread free
            except db.StoreUnavailable as exc:
                unavailable += 1
                _say_unavailable(unavailable, exc)
                wait = pauses.at_cap()
                continue
            except Exception:  # a bug must not silently cost the process its claimer
                log.exception("unexpected error in a store round; writing its outcomes one by one")
                self._write_alone()
                wait = pauses.at_cap()
                continue
            if unavailable:
                log.info("the store answers again after %d tries", unavailable)
                unavailable = 0
            wait = self._next_wait(room, claimed, pauses)

    def _next_wait(self, room: int, claimed: int, pauses: Streak) -> float | None:
        """How long to wait for a finished job or a nudge before the next round: not at all for outcomes
        still to commit; while every room is taken, until a job finishes (it wakes the claimer), but at most
        `AHEAD_SECONDS` while claiming ahead (to notice a job that runs long); indefinitely once stopping;
        otherwise the idle pause, which starts over when a round found work (the longest at once while the
        process's bell is open: `bell_open`)."""
        if self._outcomes:
            return 0.0
        if self._stopping.is_set():
            return None
        if claimed == room:  # every room taken: wait for a job to finish, or to notice one running long
            return AHEAD_SECONDS if self._runners.bursting else None
        if claimed:
            pauses.reset()
        if self.bell_open():
            # Every commit of due jobs nudges the claimer at once: quick polls after work would only find
            # what the bell announces. What no commit announces (a lease that ran out, a tenant back under
            # its cap) is left to the idle pause, as while idle.
            return pauses.at_cap()
        return pauses.failed()

    def _write_round(self, *, polled: bool) -> tuple[int, int]:
        """Commit the waiting outcomes and claim up to the room in one transaction; returns the room and
        how many jobs were claimed. A round its idle pause started (`polled`: no job finished, no commit
        rang) with nothing to commit first reads whether any job is due, and takes the write lock only if
        one is: most such polls find nothing, and on SQLite every writer of the host would wait behind an
        empty write transaction."""
        outcomes = list(self._outcomes)
        room = 0 if self._stopping.is_set() else self._runners.room()
        if not outcomes and not room:
            return 0, 0
        if polled and not outcomes and not db.read(self._engine, self._any_due):
            return room, 0
        states, claims = db.transact(self._engine, self._commit_and_claim, outcomes, room)
        self._outcomes = self._outcomes[len(outcomes) :]
        self._committed(outcomes, states)
        self._begin(claims)
        return room, len(claims)

    def _any_due(self, conn: Connection) -> bool:
        return any_due(conn, self._settings.tenant_max_running, self._held(conn), self._limits)

    def _commit_and_claim(
        self, conn: Connection, outcomes: Sequence[Finished], room: int
    ) -> tuple[list[State | None], list[Claim]]:
        now = clock.now()
        states = _commit(conn, outcomes, now, self._backoff, self._limits)
        if not room:
            return states, []
        cap, lease = self._settings.tenant_max_running, self._settings.lease_seconds
        return states, claim_due(conn, self._worker, lease, room, cap, self._held(conn), self._limits)

    def _held(self, conn: Connection) -> Share | None:
        """`TENANT_SHARE` now (`worker.share`)."""
        return self._share.held(conn, Counter(self._runners.tenants()), self._runners.bursting)

    def _write_alone(self) -> None:
        """After a round failed for a reason other than an unavailable store: each waiting outcome in a
        transaction of its own, so one the store refuses does not hold back the others. A refused one is
        left to its lease (a sweeper settles it)."""
        outcomes, self._outcomes = self._outcomes, []
        for finished in outcomes:
            try:
                now = clock.now()
                [state] = db.transact(self._engine, _commit, [finished], now, self._backoff, self._limits)
            except Exception:
                log.exception("job %s: the store refused its outcome; its lease will run out", _id(finished))
                self._runners.forget(finished.running)
                continue
            self._committed([finished], [state])

    def _committed(self, outcomes: Sequence[Finished], states: Sequence[State | None]) -> None:
        for finished, state in zip(outcomes, states, strict=True):
            self._runners.forget(finished.running)
            discard_uncommitted(self._settings, finished.running.claim, finished.outcome, state)
            name = _outcome_name(finished.running.held, state)
            self.counts.add(name)
            if name == "fenced":
                FENCED_WRITES.inc()

    def _begin(self, claims: Sequence[Claim]) -> None:
        """Hand the claimed jobs to the runners, or, when the stop came while they were being taken, give
        them back at once."""
        for claim in claims:
            if self._stopping.is_set():
                result = release(self._engine, claim)
                log.info(
                    "job %s epoch %d: claimed while stopping: %s", claim.job_id, claim.epoch, result.value
                )
                self.counts.add(result.value)
                continue
            self._runners.begin(claim)


def _commit(
    conn: Connection, outcomes: Sequence[Finished], now: float, backoff: Backoff, limits: Limits
) -> list[State | None]:
    return commit_outcomes(conn, [(f.running.claim, f.outcome) for f in outcomes], now, backoff, limits)


def _id(finished: Finished) -> str:
    return finished.running.claim.job_id


def _outcome_name(held: Held, state: State | None) -> str:
    if state is not None:
        return state.value
    return Release.RELEASED.value if held.handed_back else "fenced"
