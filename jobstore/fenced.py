"""The fenced writes: everything the worker holding a job writes while it holds it (renew the lease, mark an
external effect, save a checkpoint, complete, fail, release), and the bookkeeping of its attempt.

Every write is one guarded UPDATE under the fence (this epoch, still held, lease alive, deadline not
passed); zero rows changed means the writer lost, raised as `Fenced` (or None for one of a batch)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Float,
    and_,
    bindparam,
    case,
    func,
    not_,
    null,
    or_,
    select,
    true,
    tuple_,
    update,
)

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.jobstore import drivers, events, outbox
from outbox_bridge.jobstore.decisions import STORAGE_FAULT, Decision, decide_completion, decide_failure
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Job, dumps
from outbox_bridge.jobstore.schema import attempts, jobs, state_in
from outbox_bridge.jobstore.states import HELD, State

# Hot statements are built once with bound parameters: building a statement costs far more than running it.
_NOW = bindparam("b_now", type_=Float)
_IDS: BindParameter[list[str]] = bindparam("b_ids", expanding=True)


def _fence(job_id: Any, epoch: Any, now: Any) -> ColumnElement[bool]:
    """The guard on every worker write: this epoch, still running, lease alive, deadline not passed."""
    return and_(jobs.c.id == job_id, jobs.c.epoch == epoch, still_held(now))


def still_held(now: Any) -> ColumnElement[bool]:
    return and_(
        state_in(HELD),
        jobs.c.lease_expires_at > now,
        or_(jobs.c.deadline_at.is_(None), jobs.c.deadline_at > now),
    )


_FENCE = _fence(bindparam("b_id"), bindparam("b_epoch"), _NOW)
# The same guard for many (job id, epoch) pairs at once.
FENCES = and_(tuple_(jobs.c.id, jobs.c.epoch).in_(bindparam("b_fences", expanding=True)), still_held(_NOW))


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
    .returning(*events.COLUMNS)
)


def save_checkpoint(conn: Connection, job_id: str, epoch: int, data: dict[str, Any], now: float) -> None:
    """Store the latest safe progress; a later attempt resumes from it. `Fenced` if the lease is lost."""
    params = _fenced(job_id, epoch, now, b_checkpoint=dumps(data))
    row = conn.execute(_SAVE_CHECKPOINT, params).first()
    if row is None:
        raise Fenced(job_id, epoch)
    events.note(conn, [events.of_row("checkpointed", row)])


def _outcomes(rule: Callable[..., State], **inputs: ColumnElement[bool]) -> dict[State, ColumnElement[bool]]:
    """For each state the pure `rule` can give, the SQL condition under which it gives it: the rule's truth
    table over its boolean `inputs`, each input a SQL condition of the row. So a rule stated once, as a
    plain function with its own unit tests, is also what the guarded UPDATE applies."""
    ways: dict[State, list[ColumnElement[bool]]] = {}
    for values in itertools.product((False, True), repeat=len(inputs)):
        state = rule(**dict(zip(inputs, values, strict=True)))
        row = [cond if value else not_(cond) for cond, value in zip(inputs.values(), values, strict=True)]
        ways.setdefault(state, []).append(and_(*row))
    # The state most inputs lead to comes last, so `_state_case` can make it the ELSE.
    return {state: or_(*rows) for state, rows in sorted(ways.items(), key=lambda way: len(way[1]))}


def _state_case(outcome: dict[State, ColumnElement[bool]]) -> ColumnElement[str]:
    *named, (otherwise, _) = outcome.items()
    return case(*((when, state.value) for state, when in named), else_=otherwise.value)


def complete_statement(guard: ColumnElement[bool], attempt_id: Any) -> Any:
    # Cancel-versus-complete is `decide_completion`; the statement only applies what it says.
    outcome = _outcomes(
        decide_completion,
        cancel_requested=jobs.c.cancel_requested == true(),
        external_started=and_(jobs.c.external_epoch.is_not(None), jobs.c.external_epoch == jobs.c.epoch),
    )
    cancelled = outcome[State.CANCELLED]
    return (
        update(jobs)
        .where(guard)
        .values(
            state=_state_case(outcome),
            result_attempt_id=case((cancelled, null()), else_=attempt_id),
            error_code=case((cancelled, "cancelled"), else_=null()),
            error_message=case((cancelled, "cancelled before the result was committed"), else_=null()),
            lease_owner=None,
            lease_expires_at=None,
            updated_at=_NOW,
            finished_at=_NOW,
        )
        .returning(jobs.c.state, *events.COLUMNS)
    )


# Many at once: each job's own fence, and the result pointer names the attempt of the fenced epoch.
ATTEMPT_OF_EPOCH = (
    select(attempts.c.id)
    .where(attempts.c.job_id == jobs.c.id, attempts.c.epoch == jobs.c.epoch)
    .scalar_subquery()
)


class _Completed(NamedTuple):
    """A row of a driver's `complete_many`: the job's new state, then `events.COLUMNS`."""

    state: str
    id: str
    tenant: str
    kind: str
    epoch: int
    attempts: int
    traceparent: str | None


def complete(
    conn: Connection, job_id: str, epoch: int, attempt_id: str, output: dict[str, Any], now: float
) -> State:
    """Bind the result pointer and `succeeded` in one guarded UPDATE, unless a cancel request was committed
    first, in which case the job ends `cancelled` and no result is published - except when this attempt had
    started an external effect, which cannot be taken back: then it ends `succeeded` (see
    `decide_completion`). `Fenced` if the lease is lost: nothing is written and the attempt's output never
    becomes visible. (`complete_many` of one attempt.)"""
    [state] = complete_many(conn, [Completion(job_id, epoch, attempt_id, output)], now)
    if state is None:
        raise Fenced(job_id, epoch)
    return state


@dataclass(frozen=True)
class Completion:
    """One attempt to complete: its fence (job id, epoch), its attempt and its output (None: the result
    `null`, a kind that returned nothing)."""

    job_id: str
    epoch: int
    attempt_id: str
    output: dict[str, Any] | None


def complete_many(conn: Connection, completions: Sequence[Completion], now: float) -> list[State | None]:
    """`complete` for each attempt, each under its own fence, in one guarded UPDATE and one batch of
    attempt updates. Where `complete` would raise `Fenced`, the result is None and nothing was written for
    that attempt; the others are not disturbed."""
    if not completions:
        return []
    rows = [_Completed(*row) for row in drivers.of(conn).complete_many(conn, completions, now)]
    events.note(conn, (events.of_row(row.state, row) for row in rows))
    states = {row.id: State(row.state) for row in rows}
    return [states.get(c.job_id) for c in completions]


_FENCED_ROW = select(jobs).where(_FENCE)


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
    detail: str | None = None,
) -> Decision:
    """End an attempt that raised: `failed` (permanent), `queued` after a backoff with a new outbox row
    (transient), `dead` (budget or deadline spent) or `cancelled` (a cancel was waiting). `Fenced` if the
    lease is lost. A `STORAGE_FAULT` (the worker's storage failed, not the job) is refunded to the job's
    budget and counted against its own (`decide_failure`). The job keeps `message`, which its tenant sees;
    the attempt's record keeps `detail` when given, for the operator."""
    query = drivers.of(conn).locking(_FENCED_ROW)
    row = conn.execute(query, _fenced(job_id, epoch, now)).mappings().first()
    if row is None:
        raise Fenced(job_id, epoch)
    job = Job.from_row(row)
    storage_faults = _storage_faults(conn, job_id) + 1 if code == STORAGE_FAULT else 0
    decision = decide_failure(
        permanent=permanent,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        cancel_requested=job.cancel_requested,
        deadline_passed=False,
        backoff=backoff.seconds(job.attempts),
        code=code,
        message=message,
        storage_faults=storage_faults,
    )
    if not apply_decision(conn, job, decision, now, guard=_fence(job_id, epoch, now)):
        raise Fenced(job_id, epoch)
    outcome = "retry" if decision.state is State.QUEUED else decision.state.value
    _end_attempt(conn, attempt_id, outcome, now, code=code, message=detail or message)
    return decision


def _storage_faults(conn: Connection, job_id: str) -> int:
    """How many of the job's ended attempts met a fault of the worker's storage."""
    counted = select(func.count()).where(attempts.c.job_id == job_id, attempts.c.error_code == STORAGE_FAULT)
    return int(conn.execute(counted).scalar_one())


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
        if decision.refund:
            values["attempts"] = jobs.c.attempts - 1
    else:
        values["finished_at"] = now
    if conn.execute(update(jobs).where(guard).values(**values)).rowcount != 1:
        return False
    if decision.state is State.QUEUED:
        outbox.add(conn, job.id, available_at=values["available_at"], now=now)
        event = events.of_job("requeued", job, reason="retry", error_code=decision.error_code)
    else:
        event = events.of_job(decision.state.value, job, error_code=decision.error_code)
    events.note(conn, [event])
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
        .returning(jobs.c.state, *events.COLUMNS)
    ).first()
    if row is None:
        raise Fenced(job_id, epoch)
    if row.state == State.CANCELLED.value:
        _end_attempt(conn, attempt_id, State.CANCELLED.value, now)
        events.note(conn, [events.of_row(State.CANCELLED.value, row)])
        return
    outbox.add(conn, job_id, available_at=now, now=now)
    _end_attempt(conn, attempt_id, "released", now)
    events.note(conn, [events.of_row("requeued", row, reason="released")])


# The attempts' bookkeeping: each attempt row ends once, with the outcome of the write that ended it.

END_ATTEMPT = (
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
    conn.execute(END_ATTEMPT, ended(attempt_id, outcome, now, output=output, code=code, message=message))


def ended(
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


_LOSE_RUNNING = (
    update(attempts)
    .where(attempts.c.job_id.in_(_IDS), attempts.c.outcome == "running")
    .values(
        outcome="lost", ended_at=_NOW, error_code=bindparam("b_code"), error_message=bindparam("b_message")
    )
)


def lose_running_attempts(
    conn: Connection,
    job_ids: Sequence[str],
    now: float,
    *,
    code: str | None = None,
    message: str | None = None,
) -> None:
    """End as `lost` the attempt still running of each of `job_ids`, whose worker let its lease run out: the
    job was claimed again, or the sweeper settled it (then `code` and `message` say why). A job has at most
    one running attempt, that of its current epoch: each claim ends the one before, and each fenced write
    that ends the job ends its attempt."""
    params = {"b_ids": list(job_ids), "b_now": now, "b_code": code, "b_message": message}
    conn.execute(_LOSE_RUNNING, params)
