"""What an operator (or a tenant, for cancel) does to a job from outside: request a cancel, requeue a job
that failed, died or ended `unknown` (one, or every job a filter names), resolve an `unknown` one. Each is
one guarded UPDATE on the job's state; an operator's move also writes who did it, when and why
(`operator_actions`) in the same transaction, so no move goes unrecorded and no record names a move that
did not happen."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection

from outbox_bridge.jobstore import db, drivers, events, outbox, queries
from outbox_bridge.jobstore.errors import InvalidTransition, JobNotFound
from outbox_bridge.jobstore.filters import JobFilter
from outbox_bridge.jobstore.records import Job, OperatorAction
from outbox_bridge.jobstore.states import REQUEUE, RESOLVE, State


class CancelOutcome(StrEnum):
    CANCELLED = "cancelled"  # it was queued: cancelled at once
    REQUESTED = "requested"  # it is running: the worker will see the request
    UNCHANGED = "unchanged"  # it had already finished: the outcome stands


class Action(StrEnum):
    """What an operator did, as `operator_actions.action` records it."""

    CANCEL = "cancel"
    REQUEST_CANCEL = "request_cancel"
    REQUEUE = "requeue"
    RESOLVE_SUCCEEDED = "resolve_succeeded"
    RESOLVE_FAILED = "resolve_failed"


_CANCEL_ACTIONS = {CancelOutcome.CANCELLED: Action.CANCEL, CancelOutcome.REQUESTED: Action.REQUEST_CANCEL}
_RESOLVE_ACTIONS = {State.SUCCEEDED: Action.RESOLVE_SUCCEEDED, State.FAILED: Action.RESOLVE_FAILED}


def request_cancel(conn: Connection, job_id: str, now: float, *, tenant: str | None = None) -> CancelOutcome:
    """Cancel a queued job at once, flag a running one, leave a finished one as it is.
    `JobNotFound` for an unknown id or another tenant's job."""
    params = {"id": job_id, "tenant": tenant, "now": now}
    queued = db.execute(conn, "job_cancel_queued", params)
    if queued:
        outbox.drop_pending(conn, job_id)
        events.note(conn, [events.of_row("cancelled", events.Returned(*queued[0]))])
        return CancelOutcome.CANCELLED
    # A held job only gets the flag (no state change): its worker sees it and the job ends at its next write.
    if db.execute(conn, "job_request_cancel_running", params):
        return CancelOutcome.REQUESTED
    if not db.execute(conn, "job_exists", {"id": job_id, "tenant": tenant}):
        raise JobNotFound(job_id)
    return CancelOutcome.UNCHANGED


def cancel(
    conn: Connection, job_id: str, now: float, *, actor: str, note: str | None = None
) -> tuple[CancelOutcome, Job]:
    """Operator: `request_cancel` of any tenant's job, recorded. A finished job is refused with
    `InvalidTransition` (its outcome stands, nothing is recorded); `JobNotFound` for an unknown id."""
    outcome = request_cancel(conn, job_id, now)
    if outcome is CancelOutcome.UNCHANGED:
        raise _not_in(conn, job_id, "cancel")
    record(conn, [job_id], _CANCEL_ACTIONS[outcome], actor=actor, note=note, now=now)
    return outcome, _job(conn, job_id)


def requeue(
    conn: Connection,
    job_id: str,
    now: float,
    *,
    actor: str,
    note: str | None = None,
    unknown_too: bool = True,
) -> Job:
    """Operator: put a `failed`, `dead` or `unknown` job back in the queue with a fresh attempt budget and a
    new delivery, recorded (an `unknown` one only if `unknown_too`). `InvalidTransition` in any other state,
    `JobNotFound` for an unknown id."""
    sources = REQUEUE.sources if unknown_too else REQUEUE.sources - {State.UNKNOWN}
    params = {"id": job_id, "states": _states(conn, sources), "now": now}
    rows = db.execute(conn, "job_requeue", params)
    if not rows:
        raise _not_in(conn, job_id, "requeue")
    outbox.add(conn, job_id, available_at=now, now=now)
    record(conn, [job_id], Action.REQUEUE, actor=actor, note=note, now=now)
    job = queries.job_of(rows[0])
    events.note(conn, [events.of_job("requeued", job, reason="operator", actor=actor)])
    return job


def requeueable(matching: JobFilter) -> JobFilter:
    """`matching` narrowed to the states a requeue takes jobs from (all of them when it names none);
    `ValueError` when it names a state no job can be requeued from."""
    wrong = matching.states - REQUEUE.sources
    if wrong:
        allowed = ", ".join(sorted(REQUEUE.sources))
        raise ValueError(f"only {allowed} jobs can be requeued, not {', '.join(sorted(wrong))}")
    return replace(matching, states=matching.states or REQUEUE.sources)


def count_requeueable(conn: Connection, matching: JobFilter) -> int:
    """How many jobs `requeue_matching` would requeue now (a dry run: writes nothing)."""
    return queries.count_jobs(conn, requeueable(matching))


def requeueable_jobs(conn: Connection, matching: JobFilter, *, page: int = 500) -> list[Job]:
    """The jobs `requeue_matching` would requeue now, newest first (a dry run: writes nothing)."""
    found: list[Job] = []
    cursor: str | None = None
    while True:
        got = queries.find_jobs(conn, requeueable(matching), limit=page, cursor=cursor)
        found += got.items
        if got.next_cursor is None:
            return found
        cursor = got.next_cursor


def requeue_matching(
    conn: Connection, matching: JobFilter, now: float, *, actor: str, note: str | None = None
) -> list[str]:
    """Operator: `requeue` every job `matching` names that is in a requeueable state, as one guarded UPDATE,
    with one recorded action and one new delivery per job, all in the caller's transaction. Returns the ids
    it requeued (none when nothing matched)."""
    guarded = requeueable(matching)
    if guarded.matches_nothing:
        return []
    # A requeue's filter names finished states (`requeueable`): its jobs are read by id or from their index.
    statement = "jobs_requeue_ids" if guarded.shape == "ids" else "jobs_requeue_finished"
    moved = db.execute(conn, statement, guarded.params(conn) | {"now": now})
    rows = sorted((events.Returned(*row) for row in moved), key=lambda row: str(row.id))
    ids = [str(row.id) for row in rows]
    events.note(conn, (events.of_row("requeued", row, reason="operator", actor=actor) for row in rows))
    if ids:
        outbox.add_many(conn, [(job_id, now, now) for job_id in ids])
        record(conn, ids, Action.REQUEUE, actor=actor, note=note, now=now)
    return ids


def resolve(conn: Connection, job_id: str, outcome: State, note: str, now: float, *, actor: str) -> Job:
    """Operator: settle an `unknown` job as `succeeded` or `failed`, recorded with the note saying how it
    was decided. A job resolved as succeeded carries no error (and no result: no attempt committed one); one
    resolved as failed carries `resolved_failed` with the note. `InvalidTransition` unless it is `unknown`."""
    if outcome not in RESOLVE.targets:
        raise ValueError(f"resolve to succeeded or failed, not {outcome}")
    failed = outcome is State.FAILED
    params = {
        "id": job_id,
        "state": outcome.value,
        "error_code": "resolved_failed" if failed else None,
        "error_message": f"resolved by operator: {note}" if failed else None,
        "now": now,
    }
    rows = db.execute(conn, "job_resolve", params)
    if not rows:
        raise _not_in(conn, job_id, "resolve")
    record(conn, [job_id], _RESOLVE_ACTIONS[outcome], actor=actor, note=note, now=now)
    job = queries.job_of(rows[0])
    events.note(conn, [events.of_job("resolved", job, state=outcome.value, actor=actor)])
    return job


def resolution(job: Job, actions: list[OperatorAction]) -> OperatorAction | None:
    """The recorded action that settled `job` as succeeded, when that is how it succeeded (no attempt's
    result): such a job shows no error, and this action's note says how the operator knew."""
    if job.state is not State.SUCCEEDED or job.result_attempt_id is not None:
        return None
    settled = [a for a in actions if a.action == Action.RESOLVE_SUCCEEDED]
    return settled[-1] if settled else None


def record(
    conn: Connection, job_ids: list[str], action: Action, *, actor: str, note: str | None, now: float
) -> None:
    """Write that `actor` did `action` to each of `job_ids` at `now`, in the caller's transaction."""
    rows = [
        {"job_id": j, "action": action.value, "actor": actor, "note": note or None, "at": now}
        for j in job_ids
    ]
    db.execute_many(conn, "operator_action_add", rows)


def _states(conn: Connection, states: Collection[State]) -> Any:
    """`states` as one parameter of a statement."""
    return drivers.of(conn).array(sorted(state.value for state in states))


def _job(conn: Connection, job_id: str) -> Job:
    job = queries.get_job(conn, job_id)
    assert job is not None
    return job


def _not_in(conn: Connection, job_id: str, action: str) -> Exception:
    job = queries.get_job(conn, job_id)
    if job is None:
        return JobNotFound(job_id)
    return InvalidTransition(job_id, job.state.value, action)
