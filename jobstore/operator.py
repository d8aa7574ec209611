"""What an operator (or a tenant, for cancel) does to a job from outside: request a cancel, requeue a job
that died or ended `unknown`, resolve an `unknown` one. Each is one guarded UPDATE on the job's state."""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import Connection, and_, select, update

from jobstore import outbox, queries
from jobstore.errors import InvalidTransition, JobNotFound
from jobstore.records import Job
from jobstore.schema import jobs, state_in
from jobstore.states import CANCEL_QUEUED, HELD, REQUEUE, RESOLVE, State


class CancelOutcome(StrEnum):
    CANCELLED = "cancelled"  # it was queued: cancelled at once
    REQUESTED = "requested"  # it is running: the worker will see the request
    UNCHANGED = "unchanged"  # it had already finished: the outcome stands


def request_cancel(conn: Connection, job_id: str, now: float, *, tenant: str | None = None) -> CancelOutcome:
    """Cancel a queued job at once, flag a running one, leave a finished one as it is.
    `JobNotFound` for an unknown id or another tenant's job."""
    owned = jobs.c.id == job_id if tenant is None else and_(jobs.c.id == job_id, jobs.c.tenant == tenant)
    queued = conn.execute(
        update(jobs)
        .where(owned, state_in(CANCEL_QUEUED.sources))
        .values(
            state=State.CANCELLED.value,
            cancel_requested=True,
            error_code="cancelled",
            error_message="cancelled before it started",
            updated_at=now,
            finished_at=now,
        )
    )
    if queued.rowcount == 1:
        outbox.drop_pending(conn, job_id)
        return CancelOutcome.CANCELLED
    # A held job only gets the flag (no state change): its worker sees it and the job ends at its next write.
    running = conn.execute(
        update(jobs).where(owned, state_in(HELD)).values(cancel_requested=True, updated_at=now)
    )
    if running.rowcount == 1:
        return CancelOutcome.REQUESTED
    if conn.execute(select(jobs.c.id).where(owned)).first() is None:
        raise JobNotFound(job_id)
    return CancelOutcome.UNCHANGED


def requeue(conn: Connection, job_id: str, now: float) -> Job:
    """Operator: put a `dead` or `unknown` job back in the queue with a fresh attempt budget."""
    result = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, state_in(REQUEUE.sources))
        .values(
            state=State.QUEUED.value,
            attempts=0,
            available_at=now,
            cancel_requested=False,
            external_epoch=None,
            error_code=None,
            error_message=None,
            lease_owner=None,
            lease_expires_at=None,
            finished_at=None,
            updated_at=now,
        )
    )
    if result.rowcount != 1:
        raise _not_in(conn, job_id, "requeue")
    outbox.add(conn, job_id, available_at=now, now=now)
    job = queries.get_job(conn, job_id)
    assert job is not None
    return job


def resolve(conn: Connection, job_id: str, outcome: State, note: str, now: float) -> Job:
    """Operator: settle an `unknown` job as `succeeded` or `failed`, with a note saying how it was decided."""
    if outcome not in RESOLVE.targets:
        raise ValueError(f"resolve to succeeded or failed, not {outcome}")
    result = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, state_in(RESOLVE.sources))
        .values(
            state=outcome.value,
            error_code=None if outcome is State.SUCCEEDED else "resolved_failed",
            error_message=f"resolved by operator: {note}",
            updated_at=now,
            finished_at=now,
        )
    )
    if result.rowcount != 1:
        raise _not_in(conn, job_id, "resolve")
    job = queries.get_job(conn, job_id)
    assert job is not None
    return job


def _not_in(conn: Connection, job_id: str, action: str) -> Exception:
    job = queries.get_job(conn, job_id)
    if job is None:
        return JobNotFound(job_id)
    return InvalidTransition(job_id, job.state.value, action)
