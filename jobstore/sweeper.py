"""The sweeper: settles running jobs whose lease ran out or whose deadline passed, running jobs whose worker
is gone, and queued jobs whose deadline passed. Each job is moved by its own guarded UPDATE, so a worker that
renewed in between wins.

A worker is gone when the process registry says so (`conditions.gone_owners`: its heartbeat row not written
for `ALIVE_BEATS` beats, or its pid gone from the sweeper's own host). Its running jobs are then settled as
an expired lease settles them (queued again for a retry, `unknown` after an external effect started, the
attempt ended `lost`), without waiting for the lease, but only once a job has also gone unrenewed for
`RESCUE_QUIET_SECONDS`: a live worker renews each lease at least every two seconds, so a worker whose
heartbeat is merely late, or whose pid was misjudged, keeps its jobs. A worker that was only paused finds its
job settled when it resumes, and the fence (still `running`, this epoch, an unexpired lease) refuses its
writes, as after an expired lease."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.jobstore import conditions, db, drivers, fenced, queries
from outbox_bridge.jobstore import outbox as outbox_rows
from outbox_bridge.jobstore.decisions import Decision, decide_expired_lease
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.states import State

# A running job of a gone worker is settled before its lease runs out only once it has gone unrenewed this
# long (a live worker's lease keeper renews at least every two seconds).
RESCUE_QUIET_SECONDS = 5.0


class Settled(Counter[str]):
    """How many jobs a sweep moved to each state (by the state's name); `moves` counts the same by kind,
    queue and state, for the metrics of the jobs it ended or queued again (counted once the sweep's
    transaction committed)."""

    def __init__(self) -> None:
        super().__init__()
        self.moves: Counter[tuple[str, str, str]] = Counter()

    def note(self, job: Job, state: State) -> None:
        self[state.value] += 1
        self.moves[(job.kind, job.queue, state.value)] += 1

    def add(self, other: Settled) -> None:
        self.update(other)
        self.moves.update(other.moves)


def sweep_expired(
    conn: Connection, now: float, *, backoff: Backoff, limit: int = 500, heartbeat: float | None = None
) -> Settled:
    """Settle up to `limit` overdue jobs, and (given the processes' `heartbeat` interval) the running jobs
    of gone workers; returns how many went to each state."""
    settled = Settled()
    # The running jobs, then the queued ones, each read from its state's index in that index's order.
    rows = db.execute(conn, "jobs_overdue", {"now": now, "limit": limit})[:limit]
    for job in [queries.job_of(row) for row in rows]:
        decision = _decide(job, now, backoff)
        settle = "job_settle_overdue_running" if job.state is State.RUNNING else "job_settle_overdue_queued"
        if _settle(conn, settle, job, decision, now, {}):
            settled.note(job, decision.state)
    if heartbeat is not None and len(rows) < limit:
        settled.add(rescue_gone(conn, now, backoff=backoff, heartbeat=heartbeat, limit=limit - len(rows)))
    return settled


def rescue_gone(
    conn: Connection, now: float, *, backoff: Backoff, heartbeat: float, limit: int = 500
) -> Settled:
    """Settle, as an expired lease would, up to `limit` running jobs whose lease owner is gone
    (`conditions.gone_owners`, judged with the processes' `heartbeat` interval) and that have gone
    unrenewed for `RESCUE_QUIET_SECONDS`; returns how many went to each state. A job renewed, or claimed
    again, in between is left alone."""
    settled = Settled()
    gone = conditions.gone_owners(conn, now, heartbeat)
    if not gone:
        return settled
    guard = {"owners": drivers.of(conn).array(sorted(gone)), "quiet_since": now - RESCUE_QUIET_SECONDS}
    rows = db.execute(conn, "jobs_abandoned", {**guard, "limit": limit})
    for job in [queries.job_of(row) for row in rows]:
        decision = _decide(job, now, backoff, lease_ran_out=True)
        if _settle(conn, "job_settle_abandoned", job, decision, now, guard):
            settled.note(job, decision.state)
    return settled


def _decide(job: Job, now: float, backoff: Backoff, *, lease_ran_out: bool = False) -> Decision:
    deadline_passed = job.deadline_at is not None and job.deadline_at <= now
    if job.state is State.QUEUED:
        return Decision(State.DEAD, "deadline_exceeded", "the deadline passed before the job could start")
    return decide_expired_lease(
        external_started=job.external_epoch == job.epoch,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        cancel_requested=job.cancel_requested,
        deadline_passed=deadline_passed,
        backoff=backoff.seconds(job.attempts),
        lease_ran_out=lease_ran_out or (job.lease_expires_at is not None and job.lease_expires_at <= now),
    )


def _settle(
    conn: Connection, statement: str, job: Job, decision: Decision, now: float, guard: dict[str, Any]
) -> bool:
    """Move `job` as `decision` says with `statement`, under its epoch and the `guard` it was read under,
    then end its running attempt as lost; False (nothing written) when the guard no longer holds."""
    params = {**guard, **fenced.decided(decision, now), "id": job.id, "epoch": job.epoch, "now": now}
    if not db.execute(conn, statement, params):
        return False
    fenced.after_decision(conn, job, decision, now)
    if job.state is State.RUNNING:
        fenced.lose_running_attempts(
            conn, [job.id], now, code=decision.error_code, message=decision.error_message
        )
    return True


def reannounce_stale(conn: Connection, now: float, *, older_than: float, limit: int = 500) -> int:
    """Give a new outbox row to each queued job that has been due since before `older_than`, has not changed
    since then, has no delivery waiting to be published and is not of a paused kind (resuming the kind
    announces it). Its message was lost on the way (dead-lettered after too many redeliveries, say, or lost
    with a broker's data): without this it would wait forever. A duplicate this makes is absorbed by the
    claim. Returns how many jobs were announced again."""
    # A job a limit holds back is left to that limit's own sweep (`limits.release_held`).
    stale = db.execute(conn, "jobs_stale_queued", {"older_than": older_than, "limit": limit})
    ids = [str(job_id) for (job_id,) in stale]
    if not ids:
        return 0
    db.execute(conn, "jobs_touch_queued", {"ids": drivers.of(conn).array(ids), "now": now})
    outbox_rows.add_many(conn, [(job_id, now, now) for job_id in ids])
    return len(ids)


class DeadLetterOutcome(StrEnum):
    """What the store says about a job whose message was dead-lettered."""

    ANNOUNCED = "announced again"  # queued, nothing waiting to be published: it got a new outbox row
    ANNOUNCED_ALREADY = "already announced"  # queued with an outbox row waiting to be published
    NOT_QUEUED = "not queued"  # running (its lease settles it) or finished
    UNKNOWN = "unknown job"


def settle_dead_letters(conn: Connection, job_ids: Sequence[str], now: float) -> dict[str, DeadLetterOutcome]:
    """For each job whose message was dead-lettered: a queued job with no outbox row waiting to be published
    gets one, due when the job is; every other job needs nothing. Returns what became of each job."""
    rows = db.execute(conn, "jobs_dead_lettered", {"ids": drivers.of(conn).array(list(job_ids))})
    outcomes = dict.fromkeys(job_ids, DeadLetterOutcome.UNKNOWN)
    for job_id, state, available_at, waiting in rows:
        if state != State.QUEUED.value:
            outcomes[job_id] = DeadLetterOutcome.NOT_QUEUED
        elif waiting:
            outcomes[job_id] = DeadLetterOutcome.ANNOUNCED_ALREADY
        else:
            outbox_rows.add(conn, job_id, available_at=max(now, available_at), now=now)
            outcomes[job_id] = DeadLetterOutcome.ANNOUNCED
    return outcomes
