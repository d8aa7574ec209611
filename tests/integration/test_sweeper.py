"""sweep_expired: overdue running jobs are retried, or settled unknown or dead; queued jobs past their
deadline die; a lease renewed in time is left alone."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import Engine, select

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, fenced, operator, queries, sweeper
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.schema import outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, claimed, every_row, job_row, new_job

BACKOFF = Backoff(base=4.0, cap=60.0)


def sweep(engine: Engine, clock: FakeClock, limit: int = 500) -> Counter[str]:
    return db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF, limit=limit)


def outcomes(engine: Engine, job_id: str) -> list[tuple[str, str | None]]:
    return [(a.outcome, a.error_code) for a in db.read(engine, queries.attempts_of, job_id)]


def pending_deliveries(engine: Engine, job_id: str) -> list[float]:
    query = (
        select(outbox.c.available_at)
        .where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
        .order_by(outbox.c.id)
    )
    return db.read(engine, lambda conn: list(conn.execute(query).scalars()))


def test_an_expired_lease_is_queued_again_after_a_backoff_with_a_delivery_due_then(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    clock.set(held.lease_expires_at)
    assert sweep(engine, clock) == {"queued": 1}
    job = job_row(engine, job_id)
    assert job.state is State.QUEUED
    assert clock.now() + BACKOFF.base / 2 <= job.available_at <= clock.now() + BACKOFF.base
    assert (job.lease_owner, job.lease_expires_at, job.epoch, job.error_code) == (
        None,
        None,
        1,
        "lease_expired",
    )
    assert pending_deliveries(engine, job_id) == [job.created_at, job.available_at]
    assert outcomes(engine, job_id) == [("lost", "lease_expired")]


def test_an_expired_lease_after_an_external_effect_started_is_unknown_and_never_retried(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    db.transact(engine, fenced.mark_external_started, job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    assert sweep(engine, clock) == {"unknown": 1}
    job = job_row(engine, job_id)
    assert (job.state, job.error_code, job.finished_at) == (State.UNKNOWN, "outcome_unknown", clock.now())
    assert pending_deliveries(engine, job_id) == [job.created_at]
    assert outcomes(engine, job_id) == [("lost", "outcome_unknown")]


def test_an_external_mark_of_an_earlier_epoch_does_not_make_a_later_expiry_unknown(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    first = claimed(engine, job_id)
    db.transact(engine, fenced.mark_external_started, job_id, first.epoch, first.attempt_id, clock.now())
    db.transact(
        engine,
        fenced.fail,
        job_id,
        first.epoch,
        first.attempt_id,
        code="provider_said_retry",
        message="429",
        permanent=False,
        now=clock.now(),
        backoff=BACKOFF,
    )
    clock.set(job_row(engine, job_id).available_at)
    claimed(engine, job_id)
    clock.advance(LEASE)
    assert sweep(engine, clock) == {"queued": 1}


def test_an_expired_lease_of_the_last_attempt_is_dead(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine, max_attempts=1)
    claimed(engine, job_id)
    clock.advance(LEASE)
    assert sweep(engine, clock) == {"dead": 1}
    job = job_row(engine, job_id)
    assert (job.state, job.error_code, job.attempts) == (State.DEAD, "attempts_exhausted", 1)
    assert outcomes(engine, job_id) == [("lost", "attempts_exhausted")]


def test_an_expired_lease_with_a_cancel_request_is_cancelled(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine)
    claimed(engine, job_id)
    db.transact(engine, operator.request_cancel, job_id, clock.now())
    clock.advance(LEASE)
    assert sweep(engine, clock) == {"cancelled": 1}
    assert job_row(engine, job_id).state is State.CANCELLED


def test_a_running_job_past_its_deadline_is_dead_even_with_a_live_lease(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, deadline=10)
    held = claimed(engine, job_id)
    clock.advance(10)
    assert sweep(engine, clock) == {"dead": 1}
    assert (job_row(engine, job_id).state, job_row(engine, job_id).error_code) == (
        State.DEAD,
        "deadline_exceeded",
    )
    with pytest.raises(Fenced):
        db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {"late": 1}, clock.now())


def test_a_queued_job_past_its_deadline_is_dead_without_an_attempt(engine: Engine, clock: FakeClock) -> None:
    late = new_job(engine, "late", deadline=10)
    patient = new_job(engine, "patient", deadline=100)
    clock.advance(10)
    assert sweep(engine, clock) == {"dead": 1}
    job = job_row(engine, late)
    assert (job.state, job.error_code, job.attempts, job.finished_at) == (
        State.DEAD,
        "deadline_exceeded",
        0,
        clock.now(),
    )
    assert outcomes(engine, late) == []
    assert job_row(engine, patient).state is State.QUEUED


def test_a_lease_renewed_just_in_time_is_not_swept(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    clock.set(held.lease_expires_at - 0.001)
    db.transact(engine, fenced.renew_lease, job_id, held.epoch, clock.now(), LEASE)
    clock.set(held.lease_expires_at)
    before = every_row(engine)
    assert sweep(engine, clock) == {}
    assert every_row(engine) == before
    assert db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {}, clock.now()) == (
        State.SUCCEEDED
    )


def test_live_leases_and_waiting_jobs_are_left_alone(engine: Engine, clock: FakeClock) -> None:
    claimed(engine, new_job(engine, "running"))
    new_job(engine, "queued", deadline=60)
    clock.advance(LEASE - 0.001)
    before = every_row(engine)
    assert sweep(engine, clock) == {}
    assert every_row(engine) == before


def test_the_swept_worker_is_fenced_out_and_the_next_claim_gets_a_new_epoch(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    clock.advance(LEASE)
    sweep(engine, clock)
    with pytest.raises(Fenced):
        db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {"late": 1}, clock.now())
    clock.set(job_row(engine, job_id).available_at)
    assert claimed(engine, job_id).epoch == held.epoch + 1


def test_a_second_sweep_settles_nothing_more(engine: Engine, clock: FakeClock) -> None:
    claimed(engine, new_job(engine))
    clock.advance(LEASE)
    assert sweep(engine, clock) == {"queued": 1}
    before = every_row(engine)
    assert sweep(engine, clock) == {}
    assert every_row(engine) == before


def test_a_sweep_settles_at_most_its_limit(engine: Engine, clock: FakeClock) -> None:
    for key in ("a", "b", "c"):
        claimed(engine, new_job(engine, key))
    clock.advance(LEASE)
    assert sweep(engine, clock, limit=2) == {"queued": 2}
    assert sweep(engine, clock, limit=2) == {"queued": 1}
