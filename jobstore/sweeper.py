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

from sqlalchemy import Connection, Exists, and_, or_, select, union_all, update

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.jobstore import conditions, fenced, pausing
from outbox_bridge.jobstore import outbox as outbox_rows
from outbox_bridge.jobstore.decisions import Decision, decide_expired_lease
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schema import jobs, outbox, state_in, state_is
from outbox_bridge.jobstore.states import EXPIRE_LEASE, EXPIRE_QUEUED, State

# A running job of a gone worker is settled before its lease runs out only once it has gone unrenewed this
# long (a live worker's lease keeper renews at least every two seconds).
RESCUE_QUIET_SECONDS = 5.0


def sweep_expired(
    conn: Connection, now: float, *, backoff: Backoff, limit: int = 500, heartbeat: float | None = None
) -> Counter[str]:
    """Settle up to `limit` overdue jobs, and (given the processes' `heartbeat` interval) the running jobs
    of gone workers; returns how many went to each state."""
    settled: Counter[str] = Counter()
    overdue_running = and_(
        state_in(EXPIRE_LEASE.sources),
        or_(jobs.c.lease_expires_at <= now, jobs.c.deadline_at <= now),
    )
    overdue_queued = and_(state_in(EXPIRE_QUEUED.sources), jobs.c.deadline_at <= now)
    # The running jobs, then the queued ones, each read from its state's index in that index's order.
    running = select(jobs).where(overdue_running).order_by(jobs.c.lease_expires_at).limit(limit).subquery()
    queued = select(jobs).where(overdue_queued).order_by(jobs.c.available_at).limit(limit).subquery()
    rows = conn.execute(union_all(select(running), select(queued))).mappings().all()[:limit]
    for job in [Job.from_row(row) for row in rows]:
        decision = _decide(job, now, backoff)
        guard = and_(
            jobs.c.id == job.id,
            jobs.c.epoch == job.epoch,
            overdue_running if job.state is State.RUNNING else overdue_queued,
        )
        if fenced.apply_decision(conn, job, decision, now, guard=guard):
            _close_attempt(conn, job, decision, now)
            settled[decision.state.value] += 1
    if heartbeat is not None and len(rows) < limit:
        settled.update(rescue_gone(conn, now, backoff=backoff, heartbeat=heartbeat, limit=limit - len(rows)))
    return settled


def rescue_gone(
    conn: Connection, now: float, *, backoff: Backoff, heartbeat: float, limit: int = 500
) -> Counter[str]:
    """Settle, as an expired lease would, up to `limit` running jobs whose lease owner is gone
    (`conditions.gone_owners`, judged with the processes' `heartbeat` interval) and that have gone
    unrenewed for `RESCUE_QUIET_SECONDS`; returns how many went to each state. A job renewed, or claimed
    again, in between is left alone."""
    settled: Counter[str] = Counter()
    gone = conditions.gone_owners(conn, now, heartbeat)
    if not gone:
        return settled
    abandoned = and_(
        state_in(EXPIRE_LEASE.sources),
        jobs.c.lease_owner.in_(sorted(gone)),
        jobs.c.updated_at <= now - RESCUE_QUIET_SECONDS,
    )
    rows = conn.execute(select(jobs).where(abandoned).order_by(jobs.c.updated_at).limit(limit)).mappings()
    for job in [Job.from_row(row) for row in rows]:
        decision = _decide(job, now, backoff, lease_ran_out=True)
        guard = and_(jobs.c.id == job.id, jobs.c.epoch == job.epoch, abandoned)
        if fenced.apply_decision(conn, job, decision, now, guard=guard):
            _close_attempt(conn, job, decision, now)
            settled[decision.state.value] += 1
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


def _close_attempt(conn: Connection, job: Job, decision: Decision, now: float) -> None:
    if job.state is not State.RUNNING:
        return
    fenced.lose_running_attempts(
        conn, [job.id], now, code=decision.error_code, message=decision.error_message
    )


def reannounce_stale(conn: Connection, now: float, *, older_than: float, limit: int = 500) -> int:
    """Give a new outbox row to each queued job that has been due since before `older_than`, has not changed
    since then, has no delivery waiting to be published and is not of a paused kind (resuming the kind
    announces it). Its message was lost on the way (dead-lettered after too many redeliveries, say, or lost
    with a broker's data): without this it would wait forever. A duplicate this makes is absorbed by the
    claim. Returns how many jobs were announced again."""
    waiting = _waiting_delivery()
    stale = (
        select(jobs.c.id)
        .where(
            state_is(State.QUEUED),
            jobs.c.available_at <= older_than,
            jobs.c.updated_at <= older_than,
            ~waiting,
            pausing.NOT_PAUSED,
            jobs.c.held_by.is_(None),  # a limit's own sweep announces those (`limits.release_held`)
        )
        .order_by(jobs.c.available_at)
        .limit(limit)
    )
    ids = list(conn.execute(stale).scalars())
    if not ids:
        return 0
    conn.execute(update(jobs).where(jobs.c.id.in_(ids), state_is(State.QUEUED)).values(updated_at=now))
    for job_id in ids:
        outbox_rows.add(conn, job_id, available_at=now, now=now)
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
    rows = conn.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.available_at, _waiting_delivery().label("waiting")).where(
            jobs.c.id.in_(job_ids)
        )
    ).all()
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


def _waiting_delivery() -> Exists:
    """The job of the row at hand has an outbox row not yet published."""
    return select(outbox.c.id).where(outbox.c.job_id == jobs.c.id, outbox.c.published_at.is_(None)).exists()
