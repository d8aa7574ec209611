"""request_cancel: a queued job is cancelled at once, a running one is flagged, a finished one stands."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, fenced, operator, queries
from outbox_bridge.jobstore.errors import JobNotFound
from outbox_bridge.jobstore.schema import jobs, outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, claimed, job_row, new_job


def cancel(
    engine: Engine, clock: FakeClock, job_id: str, tenant: str | None = None
) -> operator.CancelOutcome:
    return db.transact(engine, operator.request_cancel, job_id, clock.now(), tenant=tenant)


def rows(engine: Engine) -> list[dict[str, Any]]:
    return db.read(
        engine, lambda conn: [dict(r) for r in conn.execute(select(jobs).order_by(jobs.c.id)).mappings()]
    )


def pending_outbox(engine: Engine, job_id: str) -> int:
    query = select(outbox.c.id).where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
    return len(db.read(engine, lambda conn: conn.execute(query).all()))


def test_cancel_of_a_queued_job_cancels_it_at_once_and_drops_its_pending_delivery(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    clock.advance(1)
    assert cancel(engine, clock, job_id) is operator.CancelOutcome.CANCELLED
    job = job_row(engine, job_id)
    assert (job.state, job.cancel_requested, job.error_code) == (State.CANCELLED, True, "cancelled")
    assert (job.finished_at, job.epoch, job.attempts) == (clock.now(), 0, 0)
    assert pending_outbox(engine, job_id) == 0
    refused = db.transact(engine, claiming.claim, job_id, "w1", clock.now(), LEASE)
    assert (refused.claim, refused.refusal) == (None, claiming.Refusal.TERMINAL)


def test_cancel_of_a_running_job_is_requested_and_the_job_keeps_running(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    assert cancel(engine, clock, job_id) is operator.CancelOutcome.REQUESTED
    job = job_row(engine, job_id)
    assert (job.state, job.cancel_requested, job.epoch, job.lease_owner) == (
        State.RUNNING,
        True,
        held.epoch,
        "w1",
    )
    assert job.finished_at is None


def test_a_repeated_cancel_of_a_running_job_stays_a_request(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine)
    claimed(engine, job_id)
    assert [cancel(engine, clock, job_id) for _ in range(2)] == [operator.CancelOutcome.REQUESTED] * 2
    assert job_row(engine, job_id).state is State.RUNNING


def test_cancel_of_a_succeeded_job_leaves_the_committed_result_standing(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine)
    held = claimed(engine, job_id)
    db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {"rows": 3}, clock.now())
    before = rows(engine)
    clock.advance(1)
    assert cancel(engine, clock, job_id) is operator.CancelOutcome.UNCHANGED
    assert rows(engine) == before
    result = db.read(engine, queries.committed_result, job_id)
    assert result is not None and result.output == {"rows": 3}


@pytest.mark.parametrize("ending", ["cancelled", "failed"])
def test_cancel_of_an_otherwise_finished_job_changes_nothing(
    engine: Engine, clock: FakeClock, ending: str
) -> None:
    job_id = new_job(engine)
    if ending == "cancelled":
        cancel(engine, clock, job_id)
    else:
        held = claimed(engine, job_id)
        db.transact(
            engine,
            fenced.fail,
            job_id,
            held.epoch,
            held.attempt_id,
            code="bad_input",
            message="no",
            permanent=True,
            now=clock.now(),
            backoff=Backoff(1.0, 1.0),
        )
    before = rows(engine)
    clock.advance(1)
    assert cancel(engine, clock, job_id) is operator.CancelOutcome.UNCHANGED
    assert rows(engine) == before


def test_cancel_of_an_unknown_job_is_not_found(engine: Engine, clock: FakeClock) -> None:
    with pytest.raises(JobNotFound):
        cancel(engine, clock, "no-such-job")


@pytest.mark.parametrize("running", [False, True], ids=["queued", "running"])
def test_cancel_of_another_tenants_job_is_not_found_and_changes_nothing(
    engine: Engine, clock: FakeClock, running: bool
) -> None:
    job_id = new_job(engine, tenant="acme")
    if running:
        claimed(engine, job_id)
    before = rows(engine)
    with pytest.raises(JobNotFound):
        cancel(engine, clock, job_id, tenant="globex")
    assert rows(engine) == before
    assert pending_outbox(engine, job_id) == 1


def test_cancel_by_the_owning_tenant_is_applied(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine, tenant="acme")
    assert cancel(engine, clock, job_id, tenant="acme") is operator.CancelOutcome.CANCELLED
