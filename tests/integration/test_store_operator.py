"""The operator's transitions: requeue (dead/unknown -> queued) and resolve (unknown -> succeeded/failed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, select

from core.backoff import Backoff
from core.clock import FakeClock
from jobstore import db, fenced, operator, sweeper
from jobstore.errors import InvalidTransition, JobNotFound
from jobstore.records import Claim
from jobstore.schema import outbox
from jobstore.states import State
from tests.support.store import LEASE, claimed, every_row, job_row, new_job

BACKOFF = Backoff(base=5.0, cap=60.0)


def fail(engine: Engine, clock: FakeClock, held: Claim, *, permanent: bool) -> None:
    db.transact(
        engine,
        fenced.fail,
        held.job_id,
        held.epoch,
        held.attempt_id,
        code="boom",
        message="it broke",
        permanent=permanent,
        now=clock.now(),
        backoff=BACKOFF,
    )


def dead_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, max_attempts=1)
    fail(engine, clock, claimed(engine, job_id), permanent=False)
    return job_id


def unknown_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    db.transact(engine, fenced.mark_external_started, job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    assert db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF) == {"unknown": 1}
    return job_id


def queued_job(engine: Engine, clock: FakeClock) -> str:
    return new_job(engine)


def running_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine)
    claimed(engine, job_id)
    return job_id


def succeeded_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {"sent": True}, clock.now())
    return job_id


def failed_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine)
    fail(engine, clock, claimed(engine, job_id), permanent=True)
    return job_id


def cancelled_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine)
    db.transact(engine, operator.request_cancel, job_id, clock.now())
    return job_id


JobIn = Callable[[Engine, FakeClock], str]
NOT_REQUEUEABLE: dict[str, JobIn] = {
    "queued": queued_job,
    "running": running_job,
    "succeeded": succeeded_job,
    "failed": failed_job,
    "cancelled": cancelled_job,
}
NOT_RESOLVABLE: dict[str, JobIn] = {**NOT_REQUEUEABLE, "dead": dead_job}


# requeue


def test_requeue_of_a_dead_job_gives_a_fresh_budget_and_a_new_delivery(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = dead_job(engine, clock)
    died_at = job_row(engine, job_id)
    clock.advance(60)
    job = db.transact(engine, operator.requeue, job_id, clock.now())
    assert (job.state, job.attempts, job.available_at, job.finished_at) == (
        State.QUEUED,
        0,
        clock.now(),
        None,
    )
    assert (job.error_code, job.error_message, job.cancel_requested) == (None, None, False)
    assert job.epoch == died_at.epoch, "a requeue never moves the epoch back"
    due = select(outbox.c.available_at).where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
    assert clock.now() in db.read(engine, lambda conn: list(conn.execute(due).scalars()))
    again = claimed(engine, job_id)
    assert (again.epoch, again.attempts) == (died_at.epoch + 1, 1)


def test_requeue_of_an_unknown_job_forgets_the_external_mark(engine: Engine, clock: FakeClock) -> None:
    job_id = unknown_job(engine, clock)
    job = db.transact(engine, operator.requeue, job_id, clock.now())
    assert (job.state, job.external_epoch, job.attempts) == (State.QUEUED, None, 0)
    again = claimed(engine, job_id)
    clock.advance(LEASE)
    assert db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF) == {"queued": 1}
    assert again.epoch == 2


@pytest.mark.parametrize("state", list(NOT_REQUEUEABLE))
def test_requeue_of_a_job_that_is_neither_dead_nor_unknown_is_refused(
    engine: Engine, clock: FakeClock, state: str
) -> None:
    job_id = NOT_REQUEUEABLE[state](engine, clock)
    before = every_row(engine)
    with pytest.raises(InvalidTransition) as refused:
        db.transact(engine, operator.requeue, job_id, clock.now())
    assert (refused.value.state, refused.value.action) == (state, "requeue")
    assert every_row(engine) == before


def test_requeue_of_an_unknown_id_is_not_found(engine: Engine, clock: FakeClock) -> None:
    with pytest.raises(JobNotFound):
        db.transact(engine, operator.requeue, "no-such-job", clock.now())


# resolve


@pytest.mark.parametrize(
    ("outcome", "code"),
    [(State.SUCCEEDED, None), (State.FAILED, "resolved_failed")],
    ids=["succeeded", "failed"],
)
def test_resolve_settles_an_unknown_job_with_the_operators_note(
    engine: Engine, clock: FakeClock, outcome: State, code: str | None
) -> None:
    job_id = unknown_job(engine, clock)
    clock.advance(5)
    job = db.transact(engine, operator.resolve, job_id, outcome, "provider log shows delivery", clock.now())
    assert (job.state, job.error_code, job.finished_at) == (outcome, code, clock.now())
    assert job.error_message == "resolved by operator: provider log shows delivery"
    assert job_row(engine, job_id) == job


@pytest.mark.parametrize("state", list(NOT_RESOLVABLE))
def test_resolve_of_a_job_that_is_not_unknown_is_refused(
    engine: Engine, clock: FakeClock, state: str
) -> None:
    job_id = NOT_RESOLVABLE[state](engine, clock)
    before = every_row(engine)
    with pytest.raises(InvalidTransition) as refused:
        db.transact(engine, operator.resolve, job_id, State.SUCCEEDED, "note", clock.now())
    assert (refused.value.state, refused.value.action) == (state, "resolve")
    assert every_row(engine) == before


@pytest.mark.parametrize("outcome", [State.QUEUED, State.CANCELLED, State.DEAD, State.UNKNOWN])
def test_resolve_to_anything_but_succeeded_or_failed_is_rejected(
    engine: Engine, clock: FakeClock, outcome: State
) -> None:
    job_id = unknown_job(engine, clock)
    before = every_row(engine)
    with pytest.raises(ValueError, match="succeeded or failed"):
        db.transact(engine, operator.resolve, job_id, outcome, "note", clock.now())
    assert every_row(engine) == before


def test_resolve_of_an_unknown_id_is_not_found(engine: Engine, clock: FakeClock) -> None:
    with pytest.raises(JobNotFound):
        db.transact(engine, operator.resolve, "no-such-job", State.FAILED, "note", clock.now())
