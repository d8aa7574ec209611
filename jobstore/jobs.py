"""Guarded job transitions. Each takes the caller's connection (inside the caller's transaction), runs one
guarded UPDATE, and lets the row count decide: a loser gets a named error or a refusal, never silence."""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Float,
    and_,
    bindparam,
    case,
    false,
    func,
    insert,
    null,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from jobstore import outbox
from jobstore.db import Retry
from jobstore.decisions import Decision, compute_backoff, decide_failure
from jobstore.errors import Fenced, IdempotencyConflict, InvalidTransition, JobNotFound
from jobstore.records import Claim, Job, dumps
from jobstore.schema import attempts, jobs
from jobstore.states import OPERATOR_REQUEUEABLE, RESOLVABLE_TO, TERMINAL, State


def fingerprint(kind: str, payload: Any, deadline_seconds: float | None = None) -> str:
    """The identity of a request under an idempotency key: its kind, its payload (the caller passes it
    validated and normalised) and its deadline, canonically encoded. An unset field is left out, so a request
    that does not use a field keeps the fingerprint it had before the field existed."""
    request: dict[str, Any] = {"kind": kind, "payload": payload}
    if deadline_seconds is not None:
        request["deadline_seconds"] = float(deadline_seconds)
    return hashlib.sha256(dumps(request).encode()).hexdigest()


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Accepted:
    job: Job
    created: bool


def accept(
    conn: Connection,
    *,
    tenant: str,
    owner: str,
    kind: str,
    payload: dict[str, Any],
    operation_key: str,
    now: float,
    max_attempts: int,
    deadline_seconds: float | None = None,
) -> Accepted:
    """Write the job row and its outbox row together. The same tenant + key with the same request (kind,
    payload, deadline: `fingerprint`) returns the existing job (`created=False`); with a different one,
    `IdempotencyConflict`."""
    request = {
        "tenant": tenant, "owner": owner, "kind": kind, "payload": payload, "operation_key": operation_key,
        "now": now, "max_attempts": max_attempts, "deadline_seconds": deadline_seconds,
    }  # fmt: skip
    (outcome,) = accept_many(conn, [request])
    if isinstance(outcome, IdempotencyConflict):
        raise outcome
    return outcome


def accept_many(conn: Connection, requests: Sequence[dict[str, Any]]) -> list[Accepted | IdempotencyConflict]:
    """`accept` for each request (its keyword arguments), in order, in the caller's transaction. A
    conflicting key is that request's outcome alone (nothing is written for it); a key twice in one batch
    is accepted once, as two accepts one after the other would be. The new jobs' outbox rows are written
    with one multi-row insert, and on SQLite the new jobs too (`_take_keys`)."""
    rows = [_job_row(**request) for request in requests]
    created = _take_keys(conn, rows)
    outbox.add_many(conn, [(row["id"], row["available_at"]) for row in rows if row["id"] in created])
    outcomes: list[Accepted | IdempotencyConflict] = []
    for row, request in zip(rows, requests, strict=True):
        if row["id"] in created:
            job = Job(**{**row, "payload": request["payload"], "state": State.QUEUED})
            outcomes.append(Accepted(job, created=True))
            continue
        try:
            outcomes.append(_existing(conn, row["tenant"], row["operation_key"], row["fingerprint"]))
        except IdempotencyConflict as conflict:
            outcomes.append(conflict)
    return outcomes


def _job_row(
    tenant: str,
    owner: str,
    kind: str,
    payload: dict[str, Any],
    operation_key: str,
    now: float,
    max_attempts: int,
    deadline_seconds: float | None = None,
) -> dict[str, Any]:
    """The row of a newly accepted job."""
    return {
        "id": new_id(), "tenant": tenant, "owner": owner, "operation_key": operation_key,
        "fingerprint": fingerprint(kind, payload, deadline_seconds), "kind": kind, "payload": dumps(payload),
        "state": State.QUEUED.value, "epoch": 0, "attempts": 0, "max_attempts": max_attempts,
        "lease_owner": None, "lease_expires_at": None, "available_at": now,
        "deadline_at": None if deadline_seconds is None else now + deadline_seconds,
        "cancel_requested": False, "external_epoch": None, "checkpoint": None, "checkpoint_epoch": None,
        "result_attempt_id": None, "error_code": None, "error_message": None, "created_at": now,
        "updated_at": now, "started_at": None, "finished_at": None,
    }  # fmt: skip


def _take_keys(conn: Connection, rows: Sequence[dict[str, Any]]) -> set[str]:
    """Insert the job rows whose tenant + key is free; the ids of those inserted. SQLite, one writer at a
    time, inserts them all in one statement that skips taken keys (the common case costs one statement, not
    two per job). PostgreSQL looks each key up first; when a concurrent accept of the same key wins, ours
    fails on the unique key and the transaction runs again."""
    if not rows:
        return set()
    try:
        if conn.dialect.name == "sqlite" and conn.dialect.insert_executemany_returning:
            return {str(r[0]) for r in conn.execute(_INSERT_NEW_KEY, rows)}
        taken = set()
        for row in rows:
            if _find_by_key(conn, row["tenant"], row["operation_key"]) is None:
                conn.execute(_INSERT_JOB, row)
                taken.add(row["id"])
        return taken
    except IntegrityError as exc:  # read the winner's row on the rerun
        raise Retry("idempotency key raced") from exc


def _existing(conn: Connection, tenant: str, operation_key: str, print_: str) -> Accepted:
    existing = _find_by_key(conn, tenant, operation_key)
    assert existing is not None, "the key was found taken in this transaction"
    if existing.fingerprint != print_:
        raise IdempotencyConflict(existing.id)
    return Accepted(existing, created=False)


_INSERT_JOB = insert(jobs)
_INSERT_NEW_KEY = (
    sqlite_insert(jobs)
    .on_conflict_do_nothing(index_elements=["tenant", "operation_key"])
    .returning(jobs.c.id)
)
_BY_KEY = select(jobs).where(
    jobs.c.tenant == bindparam("b_tenant"), jobs.c.operation_key == bindparam("b_key")
)


def _find_by_key(conn: Connection, tenant: str, operation_key: str) -> Job | None:
    row = conn.execute(_BY_KEY, {"b_tenant": tenant, "b_key": operation_key}).mappings().first()
    return Job.from_row(row) if row else None


class Refusal(StrEnum):
    """Why a claim took nothing."""

    NOT_FOUND = "not_found"
    TERMINAL = "terminal"  # finished already: a duplicate delivery
    LEASED = "leased"  # another live worker holds it
    NOT_AVAILABLE = "not_available"  # waiting out a retry backoff; its own outbox row will deliver it
    NEEDS_SWEEP = "needs_sweep"  # expired with an external effect, out of budget or past its deadline


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim | None = None
    refusal: Refusal | None = None
    state: State | None = None


def _claimable(now: ColumnElement[float]) -> ColumnElement[bool]:
    queued = and_(jobs.c.state == State.QUEUED.value, jobs.c.available_at <= now)
    expired = and_(
        jobs.c.state == State.RUNNING.value,
        jobs.c.lease_expires_at <= now,
        or_(jobs.c.external_epoch.is_(None), jobs.c.external_epoch != jobs.c.epoch),
    )
    return and_(
        or_(queued, expired),
        jobs.c.attempts < jobs.c.max_attempts,
        jobs.c.cancel_requested == false(),
        or_(jobs.c.deadline_at.is_(None), jobs.c.deadline_at > now),
    )


# Hot statements are built once with bound parameters: building a statement costs far more than running it.
_NOW = bindparam("b_now", type_=Float)
_IDS: BindParameter[list[str]] = bindparam("b_ids", expanding=True)


def _claim_statement(which: ColumnElement[bool]) -> Any:
    return (
        update(jobs)
        .where(which, _claimable(_NOW))
        .values(
            state=State.RUNNING.value,
            epoch=jobs.c.epoch + 1,
            attempts=jobs.c.attempts + 1,
            lease_owner=bindparam("b_worker"),
            lease_expires_at=bindparam("b_lease_until", type_=Float),
            updated_at=_NOW,
            started_at=func.coalesce(jobs.c.started_at, _NOW),
        )
        .returning(*jobs.c)
    )


_CLAIM = _claim_statement(jobs.c.id == bindparam("b_id"))
_CLAIM_MANY = _claim_statement(jobs.c.id.in_(_IDS))
# The previous attempt, if its worker vanished, ends as lost when the job is claimed again. A first claim
# (epoch 1) has no previous attempt, so it skips this statement.
_LOSE_PREVIOUS = (
    update(attempts)
    .where(attempts.c.job_id == bindparam("b_id"), attempts.c.outcome == "running")
    .values(outcome="lost", ended_at=_NOW)
)
_LOSE_PREVIOUS_MANY = (
    update(attempts)
    .where(attempts.c.job_id.in_(_IDS), attempts.c.outcome == "running")
    .values(outcome="lost", ended_at=_NOW)
)
_INSERT_ATTEMPT = insert(attempts)


def _attempt_row(job: Job, attempt_id: str, worker: str, now: float) -> dict[str, Any]:
    return {"id": attempt_id, "job_id": job.id, "epoch": job.epoch, "worker": worker, "started_at": now,
            "outcome": "running"}  # fmt: skip


def claim(conn: Connection, job_id: str, worker: str, now: float, lease_seconds: float) -> ClaimResult:
    """Take `job_id` for `worker`: epoch + 1, attempts + 1, a new lease and a new attempt row.

    Only a queued, available job (or a running one whose lease expired with no external effect started)
    within its budget and deadline is taken; otherwise the result says why not."""
    params = {"b_id": job_id, "b_now": now, "b_worker": worker, "b_lease_until": now + lease_seconds}
    row = conn.execute(_CLAIM, params).mappings().first()
    if row is None:
        return _refusal(conn, job_id, now)
    job = Job.from_row(row)
    if job.epoch > 1:
        conn.execute(_LOSE_PREVIOUS, {"b_id": job_id, "b_now": now})
    attempt_id = new_id()
    conn.execute(_INSERT_ATTEMPT, _attempt_row(job, attempt_id, worker, now))
    return ClaimResult(claim=_as_claim(job, attempt_id, worker), state=State.RUNNING)


def claim_many(
    conn: Connection, job_ids: Sequence[str], worker: str, now: float, lease_seconds: float
) -> list[ClaimResult]:
    """`claim` for each of `job_ids`, with the same guard, as if one after another in this order, but in a
    few statements whatever their number. A job named twice is taken once and refused as leased after."""
    taken = _take_many(conn, list(dict.fromkeys(job_ids)), worker, now, lease_seconds)
    results = []
    for job_id in job_ids:
        if job_id not in taken:
            results.append(_refusal(conn, job_id, now))
        elif (held := taken[job_id]) is not None:
            results.append(ClaimResult(claim=held, state=State.RUNNING))
            taken[job_id] = None  # a second delivery of it finds it leased, by this very claim
        else:
            results.append(ClaimResult(refusal=Refusal.LEASED, state=State.RUNNING))
    return results


def _take_many(
    conn: Connection, job_ids: list[str], worker: str, now: float, lease_seconds: float
) -> dict[str, Claim | None]:
    """The claims of those of `job_ids` that were claimable, by job id."""
    if not job_ids:
        return {}
    params = {"b_ids": job_ids, "b_now": now, "b_worker": worker, "b_lease_until": now + lease_seconds}
    taken = [Job.from_row(row) for row in conn.execute(_CLAIM_MANY, params).mappings()]
    again = [job.id for job in taken if job.epoch > 1]
    if again:
        conn.execute(_LOSE_PREVIOUS_MANY, {"b_ids": again, "b_now": now})
    fresh = {job.id: _as_claim(job, new_id(), worker) for job in taken}
    if fresh:
        conn.execute(
            _INSERT_ATTEMPT, [_attempt_row(job, fresh[job.id].attempt_id, worker, now) for job in taken]
        )
    claims: dict[str, Claim | None] = dict(fresh)
    return claims


def _as_claim(job: Job, attempt_id: str, worker: str) -> Claim:
    assert job.lease_expires_at is not None
    return Claim(
        job_id=job.id,
        attempt_id=attempt_id,
        epoch=job.epoch,
        attempts=job.attempts,
        worker=worker,
        kind=job.kind,
        payload=job.payload,
        tenant=job.tenant,
        owner=job.owner,
        operation_key=job.operation_key,
        deadline_at=job.deadline_at,
        lease_expires_at=job.lease_expires_at,
        checkpoint=job.checkpoint,
        created_at=job.created_at,
    )


def _refusal(conn: Connection, job_id: str, now: float) -> ClaimResult:
    job = get_job(conn, job_id)
    if job is None:
        return ClaimResult(refusal=Refusal.NOT_FOUND)
    if job.state in TERMINAL:
        return ClaimResult(refusal=Refusal.TERMINAL, state=job.state)
    if job.state is State.RUNNING and (job.lease_expires_at or 0) > now:
        return ClaimResult(refusal=Refusal.LEASED, state=job.state)
    if job.state is State.QUEUED and job.available_at > now:
        return ClaimResult(refusal=Refusal.NOT_AVAILABLE, state=job.state)
    return ClaimResult(refusal=Refusal.NEEDS_SWEEP, state=job.state)


_NEXT = select(jobs.c.id).where(_claimable(_NOW)).order_by(jobs.c.available_at).limit(1)
_NEXT_SKIP_LOCKED = _NEXT.with_for_update(skip_locked=True)


def claim_next(conn: Connection, worker: str, now: float, lease_seconds: float) -> Claim | None:
    """The baseline's path: claim the oldest claimable job, or None when there is none.

    Pending outbox rows of the claimed job are dropped: the job is already in a worker's hands."""
    candidate = _NEXT_SKIP_LOCKED if conn.dialect.name == "postgresql" else _NEXT
    job_id = conn.execute(candidate, {"b_now": now}).scalar()
    if job_id is None:
        return None
    result = claim(conn, job_id, worker, now, lease_seconds)
    if result.claim is not None:
        outbox.drop_pending(conn, job_id)
    return result.claim


def _fence(job_id: Any, epoch: Any, now: Any) -> ColumnElement[bool]:
    """The guard on every worker write: this epoch, still running, lease alive, deadline not passed."""
    return and_(jobs.c.id == job_id, jobs.c.epoch == epoch, _still_held(now))


def _still_held(now: Any) -> ColumnElement[bool]:
    return and_(
        jobs.c.state == State.RUNNING.value,
        jobs.c.lease_expires_at > now,
        or_(jobs.c.deadline_at.is_(None), jobs.c.deadline_at > now),
    )


_FENCE = _fence(bindparam("b_id"), bindparam("b_epoch"), _NOW)
# The same guard for many (job id, epoch) pairs at once.
_FENCES = and_(tuple_(jobs.c.id, jobs.c.epoch).in_(bindparam("b_fences", expanding=True)), _still_held(_NOW))


def _fenced(job_id: str, epoch: int, now: float, **more: Any) -> dict[str, Any]:
    return {"b_id": job_id, "b_epoch": epoch, "b_now": now, **more}


_RENEW = (
    update(jobs)
    .where(_FENCE)
    .values(lease_expires_at=bindparam("b_lease_until", type_=Float), updated_at=_NOW)
    .returning(jobs.c.cancel_requested)
)


def renew_lease(conn: Connection, job_id: str, epoch: int, now: float, lease_seconds: float) -> bool:
    """Extend the lease; returns whether a cancel has been requested. `Fenced` if the lease is lost."""
    row = conn.execute(_RENEW, _fenced(job_id, epoch, now, b_lease_until=now + lease_seconds)).first()
    if row is None:
        raise Fenced(job_id, epoch)
    return bool(row[0])


_MARK_EXTERNAL = update(jobs).where(_FENCE).values(external_epoch=jobs.c.epoch, updated_at=_NOW)
_MARK_ATTEMPT_EXTERNAL = (
    update(attempts).where(attempts.c.id == bindparam("b_attempt")).values(external_started_at=_NOW)
)


def mark_external_started(conn: Connection, job_id: str, epoch: int, attempt_id: str, now: float) -> None:
    """Record, before an external call, that its effect may happen: a lost lease from here on ends the
    job in `unknown` instead of a retry. `Fenced` if the lease is lost (then the call must not be made)."""
    if conn.execute(_MARK_EXTERNAL, _fenced(job_id, epoch, now)).rowcount != 1:
        raise Fenced(job_id, epoch)
    conn.execute(_MARK_ATTEMPT_EXTERNAL, {"b_attempt": attempt_id, "b_now": now})


_SAVE_CHECKPOINT = (
    update(jobs)
    .where(_FENCE)
    .values(checkpoint=bindparam("b_checkpoint"), checkpoint_epoch=jobs.c.epoch, updated_at=_NOW)
)


def save_checkpoint(conn: Connection, job_id: str, epoch: int, data: dict[str, Any], now: float) -> None:
    """Store the latest safe progress; a later attempt resumes from it. `Fenced` if the lease is lost."""
    params = _fenced(job_id, epoch, now, b_checkpoint=dumps(data))
    if conn.execute(_SAVE_CHECKPOINT, params).rowcount != 1:
        raise Fenced(job_id, epoch)


def _complete_statement(guard: ColumnElement[bool], attempt_id: Any) -> Any:
    external_started = and_(jobs.c.external_epoch.is_not(None), jobs.c.external_epoch == jobs.c.epoch)
    cancelled = and_(jobs.c.cancel_requested == true(), ~external_started)
    return (
        update(jobs)
        .where(guard)
        .values(
            state=case((cancelled, State.CANCELLED.value), else_=State.SUCCEEDED.value),
            result_attempt_id=case((cancelled, null()), else_=attempt_id),
            error_code=case((cancelled, "cancelled"), else_=null()),
            error_message=case((cancelled, "cancelled before the result was committed"), else_=null()),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=_NOW,
            finished_at=_NOW,
        )
        .returning(jobs.c.state)
    )


_COMPLETE = _complete_statement(_FENCE, bindparam("b_attempt"))
# Many at once: each job's own fence, and the result pointer names the attempt of the fenced epoch.
_COMPLETE_MANY = _complete_statement(
    _FENCES,
    select(attempts.c.id)
    .where(attempts.c.job_id == jobs.c.id, attempts.c.epoch == jobs.c.epoch)
    .scalar_subquery(),
).returning(jobs.c.id)


def complete(
    conn: Connection, job_id: str, epoch: int, attempt_id: str, output: dict[str, Any], now: float
) -> State:
    """Bind the result pointer and `succeeded` in one guarded UPDATE, unless a cancel request was committed
    first, in which case the job ends `cancelled` and no result is published - except when this attempt had
    started an external effect, which cannot be taken back: then it ends `succeeded` (see
    `decide_completion`). `Fenced` if the lease is lost: nothing is written and the attempt's output never
    becomes visible."""
    row = conn.execute(_COMPLETE, _fenced(job_id, epoch, now, b_attempt=attempt_id)).first()
    if row is None:
        raise Fenced(job_id, epoch)
    state = State(row[0])
    _end_attempt(conn, attempt_id, state.value, now, output=output)
    return state


@dataclass(frozen=True)
class Finishing:
    """One attempt to complete: its fence (job id, epoch), its attempt and its output."""

    job_id: str
    epoch: int
    attempt_id: str
    output: dict[str, Any]


def complete_many(conn: Connection, finishing: Sequence[Finishing], now: float) -> list[State | None]:
    """`complete` for each attempt, each under its own fence, in one guarded UPDATE and one batch of
    attempt updates. Where `complete` would raise `Fenced`, the result is None and nothing was written for
    that attempt; the others are not disturbed."""
    if not finishing:
        return []
    fences = [(f.job_id, f.epoch) for f in finishing]
    rows = conn.execute(_COMPLETE_MANY, {"b_fences": fences, "b_now": now}).all()
    states = {str(row[1]): State(row[0]) for row in rows}
    ended = [
        _ended(f.attempt_id, states[f.job_id].value, now, output=f.output)
        for f in finishing
        if f.job_id in states
    ]
    if ended:
        conn.execute(_END_ATTEMPT, ended)
    return [states.get(f.job_id) for f in finishing]


@dataclass(frozen=True)
class Backoff:
    base: float
    cap: float
    rng: random.Random | None = None

    def seconds(self, attempts: int) -> float:
        return compute_backoff(attempts, base=self.base, cap=self.cap, rng=self.rng)


_FENCED_ROW = select(jobs).where(_FENCE)
_FENCED_ROW_FOR_UPDATE = _FENCED_ROW.with_for_update()


def fail(
    conn: Connection,
    job_id: str,
    epoch: int,
    attempt_id: str,
    *,
    code: str,
    message: str,
    permanent: bool,
    now: float,
    backoff: Backoff,
) -> Decision:
    """End an attempt that raised: `failed` (permanent), `queued` after a backoff with a new outbox row
    (transient), `dead` (budget or deadline spent) or `cancelled` (a cancel was waiting). `Fenced` if the
    lease is lost."""
    query = _FENCED_ROW_FOR_UPDATE if conn.dialect.name == "postgresql" else _FENCED_ROW
    row = conn.execute(query, _fenced(job_id, epoch, now)).mappings().first()
    if row is None:
        raise Fenced(job_id, epoch)
    job = Job.from_row(row)
    decision = decide_failure(
        permanent=permanent,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        cancel_requested=job.cancel_requested,
        deadline_passed=False,
        backoff=backoff.seconds(job.attempts),
        code=code,
        message=message,
    )
    if not apply_decision(conn, job, decision, now, guard=_fence(job_id, epoch, now)):
        raise Fenced(job_id, epoch)
    outcome = "retry" if decision.state is State.QUEUED else decision.state.value
    _end_attempt(conn, attempt_id, outcome, now, code=code, message=message)
    return decision


def apply_decision(
    conn: Connection, job: Job, decision: Decision, now: float, *, guard: ColumnElement[bool]
) -> bool:
    """Move `job` as `decision` says, under `guard`; a retry gets an outbox row that comes due after the
    backoff. Returns False (and writes nothing) when the guard no longer holds."""
    values: dict[str, Any] = {
        "state": decision.state.value,
        "error_code": decision.error_code,
        "error_message": decision.error_message,
        "lease_owner": None,
        "lease_expires_at": None,
        "updated_at": now,
    }
    if decision.state is State.QUEUED:
        values["available_at"] = now + (decision.retry_in or 0.0)
    else:
        values["finished_at"] = now
    if conn.execute(update(jobs).where(guard).values(**values)).rowcount != 1:
        return False
    if decision.state is State.QUEUED:
        outbox.add(conn, job.id, available_at=values["available_at"], now=now)
    return True


def release(conn: Connection, job_id: str, epoch: int, attempt_id: str, now: float) -> None:
    """Give a job back unfinished on a clean shutdown: `queued`, available now, its attempt not counted;
    `cancelled` instead when a cancel request was committed (a queued job is never claimed with one, so it
    would wait forever). Refused (`Fenced`) once an external effect has started: such a job must be
    finished, not repeated."""
    guard = and_(
        _fence(job_id, epoch, now),
        or_(jobs.c.external_epoch.is_(None), jobs.c.external_epoch != epoch),
    )
    cancelled = jobs.c.cancel_requested == true()
    row = conn.execute(
        update(jobs)
        .where(guard)
        .values(
            state=case((cancelled, State.CANCELLED.value), else_=State.QUEUED.value),
            attempts=jobs.c.attempts - 1,
            available_at=now,
            error_code=case((cancelled, "cancelled"), else_=jobs.c.error_code),
            error_message=case((cancelled, "cancelled before it could finish"), else_=jobs.c.error_message),
            finished_at=case((cancelled, now), else_=null()),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=now,
        )
        .returning(jobs.c.state)
    ).first()
    if row is None:
        raise Fenced(job_id, epoch)
    if row[0] == State.CANCELLED.value:
        _end_attempt(conn, attempt_id, State.CANCELLED.value, now)
        return
    outbox.add(conn, job_id, available_at=now, now=now)
    _end_attempt(conn, attempt_id, "released", now)


_END_ATTEMPT = (
    update(attempts)
    .where(attempts.c.id == bindparam("b_attempt"))
    .values(
        outcome=bindparam("b_outcome"),
        ended_at=_NOW,
        output=bindparam("b_output"),
        error_code=bindparam("b_code"),
        error_message=bindparam("b_message"),
    )
)


def _end_attempt(
    conn: Connection,
    attempt_id: str,
    outcome: str,
    now: float,
    *,
    output: dict[str, Any] | None = None,
    code: str | None = None,
    message: str | None = None,
) -> None:
    conn.execute(_END_ATTEMPT, _ended(attempt_id, outcome, now, output=output, code=code, message=message))


def _ended(
    attempt_id: str,
    outcome: str,
    now: float,
    *,
    output: dict[str, Any] | None = None,
    code: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    encoded = None if output is None else dumps(output)
    return {"b_attempt": attempt_id, "b_outcome": outcome, "b_now": now, "b_output": encoded,
            "b_code": code, "b_message": message}  # fmt: skip


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
        .where(owned, jobs.c.state == State.QUEUED.value)
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
    running = conn.execute(
        update(jobs)
        .where(owned, jobs.c.state == State.RUNNING.value)
        .values(cancel_requested=True, updated_at=now)
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
        .where(jobs.c.id == job_id, jobs.c.state.in_([s.value for s in OPERATOR_REQUEUEABLE]))
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
    job = get_job(conn, job_id)
    assert job is not None
    return job


def resolve(conn: Connection, job_id: str, outcome: State, note: str, now: float) -> Job:
    """Operator: settle an `unknown` job as `succeeded` or `failed`, with a note saying how it was decided."""
    if outcome not in RESOLVABLE_TO:
        raise ValueError(f"resolve to succeeded or failed, not {outcome}")
    result = conn.execute(
        update(jobs)
        .where(jobs.c.id == job_id, jobs.c.state == State.UNKNOWN.value)
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
    job = get_job(conn, job_id)
    assert job is not None
    return job


def _not_in(conn: Connection, job_id: str, action: str) -> Exception:
    job = get_job(conn, job_id)
    if job is None:
        return JobNotFound(job_id)
    return InvalidTransition(job_id, job.state.value, action)


_BY_ID = select(jobs).where(jobs.c.id == bindparam("b_id"))
_BY_ID_AND_TENANT = _BY_ID.where(jobs.c.tenant == bindparam("b_tenant"))


def get_job(conn: Connection, job_id: str, *, tenant: str | None = None) -> Job | None:
    """The job, or None when it does not exist or belongs to another tenant."""
    if tenant is None:
        row = conn.execute(_BY_ID, {"b_id": job_id}).mappings().first()
    else:
        row = conn.execute(_BY_ID_AND_TENANT, {"b_id": job_id, "b_tenant": tenant}).mappings().first()
    return Job.from_row(row) if row else None
