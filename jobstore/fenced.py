"""The fenced writes: everything the worker holding a job writes while it holds it (renew the lease, mark an
external effect, save a checkpoint, complete, fail, snooze, release), and the bookkeeping of its attempt.

Every write is one guarded UPDATE under the fence (this epoch, still held, lease alive, deadline not
passed), written out in each statement of the drivers' `completion.sql`; zero rows changed means the writer
lost, raised as `Fenced` (or None for one of a batch)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Connection

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.jobstore import db, drivers, events, outbox
from outbox_bridge.jobstore.decisions import SNOOZED_TOO_OFTEN, STORAGE_FAULT, Decision, decide_failure
from outbox_bridge.jobstore.drivers import attempt_ended
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Job, dumps
from outbox_bridge.jobstore.schema import JOB_COLUMNS
from outbox_bridge.jobstore.states import State


def _fenced(job_id: str, epoch: int, now: float, **more: Any) -> dict[str, Any]:
    """The parameters of a statement under the fence of (`job_id`, `epoch`) at `now`."""
    return {"id": job_id, "epoch": epoch, "now": now, **more}


class _Moved(NamedTuple):
    """What a statement that moves a job returns (`complete_many`, `release_job`): its new state, then what
    its event needs (`events.Returned`)."""

    state: str
    id: str
    tenant: str
    kind: str
    epoch: int
    attempts: int
    traceparent: str | None


def renew_lease(conn: Connection, job_id: str, epoch: int, now: float, lease_seconds: float) -> bool:
    """Extend the lease; returns whether a cancel has been requested. `Fenced` if the lease is lost."""
    rows = db.execute(conn, "renew_lease", _fenced(job_id, epoch, now, lease_until=now + lease_seconds))
    if not rows:
        raise Fenced(job_id, epoch)
    return bool(rows[0][0])


def mark_external_started(conn: Connection, job_id: str, epoch: int, attempt_id: str, now: float) -> None:
    """Record, before an external call, that its effect may happen: a lost lease from here on ends the
    job in `unknown` instead of a retry. `Fenced` if the lease is lost (then the call must not be made)."""
    if not db.execute(conn, "mark_external_started", _fenced(job_id, epoch, now)):
        raise Fenced(job_id, epoch)
    db.execute(conn, "mark_attempt_external", {"attempt": attempt_id, "now": now})


def save_checkpoint(conn: Connection, job_id: str, epoch: int, data: dict[str, Any], now: float) -> None:
    """Store the latest safe progress; a later attempt resumes from it. `Fenced` if the lease is lost."""
    rows = db.execute(conn, "save_checkpoint", _fenced(job_id, epoch, now, checkpoint=dumps(data)))
    if not rows:
        raise Fenced(job_id, epoch)
    events.note(conn, [events.of_row("checkpointed", events.Returned(*rows[0]))])


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
    attempt updates (`Driver.complete_many`). Where `complete` would raise `Fenced`, the result is None and
    nothing was written for that attempt; the others are not disturbed."""
    if not completions:
        return []
    rows = [_Moved(*row) for row in drivers.of(conn).complete_many(conn, completions, now)]
    events.note(conn, (events.of_row(row.state, row) for row in rows))
    states = {row.id: State(row.state) for row in rows}
    return [states.get(c.job_id) for c in completions]


class _Failure(NamedTuple):
    """An attempt's failure as `fail` records it (`detail`: for the attempt's record only)."""

    code: str
    message: str
    permanent: bool = False
    detail: str | None = None


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
    job = _held_job(conn, job_id, epoch, now)
    failure = _Failure(code, message, permanent, detail)
    return _fail_held(conn, job, attempt_id, failure, now, backoff)


def _held_job(conn: Connection, job_id: str, epoch: int, now: float) -> Job:
    """The job row under the fence of (`job_id`, `epoch`) at `now`, locked until the transaction ends;
    `Fenced` if the lease is lost."""
    rows = db.execute(conn, "fenced_job", _fenced(job_id, epoch, now))
    if not rows:
        raise Fenced(job_id, epoch)
    return Job.from_row(dict(zip(JOB_COLUMNS, rows[0], strict=True)))


def _fail_held(
    conn: Connection, job: Job, attempt_id: str, failure: _Failure, now: float, backoff: Backoff
) -> Decision:
    """`fail` of the job `_held_job` read in this transaction."""
    storage_faults = _storage_faults(conn, job.id) + 1 if failure.code == STORAGE_FAULT else 0
    decision = decide_failure(
        permanent=failure.permanent,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        cancel_requested=job.cancel_requested,
        deadline_passed=False,
        backoff=backoff.seconds(job.attempts),
        code=failure.code,
        message=failure.message,
        storage_faults=storage_faults,
    )
    if not db.execute(conn, "fail_job", _fenced(job.id, job.epoch, now, **decided(decision, now))):
        raise Fenced(job.id, job.epoch)
    after_decision(conn, job, decision, now)
    outcome = "retry" if decision.state is State.QUEUED else decision.state.value
    _end_attempt(conn, attempt_id, outcome, now, code=failure.code, message=failure.detail or failure.message)
    return decision


def snooze(
    conn: Connection,
    job_id: str,
    epoch: int,
    attempt_id: str,
    *,
    seconds: float,
    now: float,
    max_snoozes: int,
    backoff: Backoff,
) -> Decision:
    """The kind snoozed the job (`outbox_bridge.Snooze`): `queued`, due in `seconds`, with a new outbox row
    due then, its attempt given back to the budget (`attempts` - 1: it counts real tries) and `snoozes` + 1;
    the attempt ends `snoozed`. A job that snoozed `max_snoozes` times already fails the attempt instead
    (`fail`, code `SNOOZED_TOO_OFTEN`: retried after `backoff` within the budget), and one with a cancel
    request waiting ends `cancelled`. `Fenced` if the lease is lost."""
    job = _held_job(conn, job_id, epoch, now)
    if job.cancel_requested or job.snoozes >= max_snoozes:
        failure = (
            _Failure("cancelled", "cancelled while running")
            if job.cancel_requested
            else _Failure(SNOOZED_TOO_OFTEN, f"The job snoozed {job.snoozes} times, the most it may.")
        )
        return _fail_held(conn, job, attempt_id, failure, now, backoff)
    due = now + seconds
    rows = db.execute(conn, "snooze_job", _fenced(job_id, epoch, now, available_at=due))
    if not rows:
        raise Fenced(job_id, epoch)
    outbox.add(conn, job_id, available_at=due, now=now)
    _end_attempt(conn, attempt_id, "snoozed", now)
    events.note(conn, [events.of_row("snoozed", events.Returned(*rows[0]), seconds=seconds)])
    return Decision(State.QUEUED, retry_in=seconds, refund=True)


def _storage_faults(conn: Connection, job_id: str) -> int:
    """How many of the job's ended attempts met a fault of the worker's storage."""
    [(count,)] = db.execute(conn, "storage_faults", {"job": job_id, "code": STORAGE_FAULT})
    return int(count)


def decided(decision: Decision, now: float) -> dict[str, Any]:
    """The values a statement that applies `decision` at `now` writes (`fail_job`, the sweeper's settling
    statements): the state and its error; for a retry, when it comes due and the attempts it gives back
    (`refund`); for any other state, when it finished."""
    retry = decision.state is State.QUEUED
    return {
        "state": decision.state.value,
        "code": decision.error_code,
        "message": decision.error_message,
        "available_at": now + (decision.retry_in or 0.0) if retry else None,
        "refund": 1 if retry and decision.refund else 0,
        "finished_at": None if retry else now,
    }


def after_decision(conn: Connection, job: Job, decision: Decision, now: float) -> None:
    """What follows `decision` once it moved `job`: a retry gets an outbox row that comes due after the
    backoff, and the job's event is noted."""
    if decision.state is State.QUEUED:
        outbox.add(conn, job.id, available_at=now + (decision.retry_in or 0.0), now=now)
        event = events.of_job("requeued", job, reason="retry", error_code=decision.error_code)
    else:
        event = events.of_job(decision.state.value, job, error_code=decision.error_code)
    events.note(conn, [event])


def release(conn: Connection, job_id: str, epoch: int, attempt_id: str, now: float) -> None:
    """Give a job back unfinished on a clean shutdown: `queued`, available now, its attempt not counted;
    `cancelled` instead when a cancel request was committed (a queued job is never claimed with one, so it
    would wait forever). Refused (`Fenced`) once an external effect has started: such a job must be
    finished, not repeated."""
    rows = db.execute(conn, "release_job", _fenced(job_id, epoch, now))
    if not rows:
        raise Fenced(job_id, epoch)
    row = _Moved(*rows[0])
    if row.state == State.CANCELLED.value:
        _end_attempt(conn, attempt_id, State.CANCELLED.value, now)
        events.note(conn, [events.of_row(State.CANCELLED.value, row)])
        return
    outbox.add(conn, job_id, available_at=now, now=now)
    _end_attempt(conn, attempt_id, "released", now)
    events.note(conn, [events.of_row("requeued", row, reason="released")])


# The attempts' bookkeeping: each attempt row ends once, with the outcome of the write that ended it.


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
    db.execute(
        conn,
        "end_attempt",
        attempt_ended(attempt_id, outcome, now, output=output, code=code, message=message),
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
    params = {"jobs": drivers.of(conn).array(job_ids), "now": now, "code": code, "message": message}
    db.execute(conn, "lose_running_attempts", params)
