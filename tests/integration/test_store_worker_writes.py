"""What a worker holding a live lease writes: renewals, the external-effect mark, checkpoints, and the
outcome of its attempt (complete, fail, release)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, select

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, decisions, fenced, operator, queries
from outbox_bridge.jobstore.errors import Fenced
from outbox_bridge.jobstore.records import Attempt, Claim
from outbox_bridge.jobstore.schema import outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, claimed, job_row, new_job

BACKOFF = Backoff(base=8.0, cap=60.0)


def running(engine: Engine, *, max_attempts: int = 3) -> Claim:
    """A new job, claimed by w1."""
    return claimed(engine, new_job(engine, max_attempts=max_attempts))


def attempt_row(engine: Engine, held: Claim) -> Attempt:
    [attempt] = [a for a in db.read(engine, queries.attempts_of, held.job_id) if a.id == held.attempt_id]
    return attempt


def outbox_rows(engine: Engine, job_id: str) -> list[dict[str, Any]]:
    query = select(outbox).where(outbox.c.job_id == job_id).order_by(outbox.c.id)
    return db.read(engine, lambda conn: [dict(r) for r in conn.execute(query).mappings()])


def fail(engine: Engine, clock: FakeClock, held: Claim, *, permanent: bool = False) -> decisions.Decision:
    return db.transact(
        engine,
        fenced.fail,
        held.job_id,
        held.epoch,
        held.attempt_id,
        code="flaky",
        message="upstream timed out",
        permanent=permanent,
        now=clock.now(),
        backoff=BACKOFF,
    )


def complete(engine: Engine, clock: FakeClock, held: Claim, output: dict[str, Any]) -> State:
    return db.transact(engine, fenced.complete, held.job_id, held.epoch, held.attempt_id, output, clock.now())


def cancel(engine: Engine, clock: FakeClock, job_id: str) -> operator.CancelOutcome:
    return db.transact(engine, operator.request_cancel, job_id, clock.now())


# renew_lease, mark_external_started, save_checkpoint


def test_renew_lease_extends_the_lease_from_now(engine: Engine, clock: FakeClock) -> None:
    held = running(engine)
    clock.advance(LEASE - 1)
    cancel_requested = db.transact(engine, fenced.renew_lease, held.job_id, held.epoch, clock.now(), LEASE)
    assert cancel_requested is False
    assert job_row(engine, held.job_id).lease_expires_at == clock.now() + LEASE


def test_renew_lease_carries_a_committed_cancel_request_back_to_the_worker(
    engine: Engine, clock: FakeClock
) -> None:
    held = running(engine)
    assert cancel(engine, clock, held.job_id) is operator.CancelOutcome.REQUESTED
    assert db.transact(engine, fenced.renew_lease, held.job_id, held.epoch, clock.now(), LEASE) is True


def test_mark_external_started_records_the_epoch_and_the_attempt(engine: Engine, clock: FakeClock) -> None:
    held = running(engine)
    clock.advance(2)
    db.transact(engine, fenced.mark_external_started, held.job_id, held.epoch, held.attempt_id, clock.now())
    assert job_row(engine, held.job_id).external_epoch == held.epoch
    assert attempt_row(engine, held).external_started_at == clock.now()


def test_save_checkpoint_keeps_the_latest_progress_and_its_epoch(engine: Engine, clock: FakeClock) -> None:
    held = running(engine)
    for step in (1, 2):
        db.transact(engine, fenced.save_checkpoint, held.job_id, held.epoch, {"step": step}, clock.now())
    job = job_row(engine, held.job_id)
    assert (job.checkpoint, job.checkpoint_epoch) == ({"step": 2}, held.epoch)


# complete


def test_complete_binds_the_result_pointer_and_succeeded_together(engine: Engine, clock: FakeClock) -> None:
    held = running(engine)
    clock.advance(3)
    assert complete(engine, clock, held, {"rows": 10}) is State.SUCCEEDED
    job = job_row(engine, held.job_id)
    assert (job.state, job.result_attempt_id) == (State.SUCCEEDED, held.attempt_id)
    assert (job.lease_owner, job.lease_expires_at, job.finished_at) == (None, None, clock.now())
    assert (job.error_code, job.error_message) == (None, None)
    result = db.read(engine, queries.committed_result, held.job_id)
    assert result is not None
    assert (result.id, result.outcome, result.output, result.ended_at) == (
        held.attempt_id,
        "succeeded",
        {"rows": 10},
        clock.now(),
    )


def test_complete_after_a_committed_cancel_request_ends_cancelled_without_a_result(
    engine: Engine, clock: FakeClock
) -> None:
    held = running(engine)
    cancel(engine, clock, held.job_id)
    assert complete(engine, clock, held, {"rows": 10}) is State.CANCELLED
    job = job_row(engine, held.job_id)
    assert (job.state, job.result_attempt_id, job.error_code) == (State.CANCELLED, None, "cancelled")
    assert db.read(engine, queries.committed_result, held.job_id) is None
    assert attempt_row(engine, held).outcome == "cancelled"


def test_complete_after_a_retry_clears_the_earlier_error(engine: Engine, clock: FakeClock) -> None:
    first = running(engine)
    fail(engine, clock, first)
    clock.set(job_row(engine, first.job_id).available_at)
    second = claimed(engine, first.job_id)
    complete(engine, clock, second, {"ok": True})
    job = job_row(engine, first.job_id)
    assert (job.state, job.result_attempt_id, job.error_code) == (State.SUCCEEDED, second.attempt_id, None)
    assert attempt_row(engine, first).outcome == "retry"


# fail


def test_transient_failure_queues_a_retry_after_the_backoff_with_an_outbox_row_due_then(
    engine: Engine, clock: FakeClock
) -> None:
    held = running(engine)
    decision = fail(engine, clock, held)
    job = job_row(engine, held.job_id)
    assert decision.state is State.QUEUED and decision.retry_in is not None
    assert BACKOFF.base / 2 <= decision.retry_in <= BACKOFF.base
    assert (job.state, job.available_at) == (State.QUEUED, clock.now() + decision.retry_in)
    assert (job.lease_owner, job.lease_expires_at, job.error_code) == (None, None, "flaky")
    assert [r["available_at"] for r in outbox_rows(engine, held.job_id) if r["published_at"] is None] == [
        clock.now(),
        job.available_at,
    ]
    attempt = attempt_row(engine, held)
    assert (attempt.outcome, attempt.error_code, attempt.ended_at) == ("retry", "flaky", clock.now())


def test_transient_failure_of_the_last_attempt_is_dead_without_a_new_outbox_row(
    engine: Engine, clock: FakeClock
) -> None:
    held = running(engine, max_attempts=2)
    fail(engine, clock, held)
    clock.set(job_row(engine, held.job_id).available_at)
    last = claimed(engine, held.job_id)
    assert last.attempts == 2
    rows_before = len(outbox_rows(engine, held.job_id))
    assert fail(engine, clock, last).state is State.DEAD
    job = job_row(engine, held.job_id)
    assert (job.state, job.error_code, job.finished_at) == (State.DEAD, "attempts_exhausted", clock.now())
    assert len(outbox_rows(engine, held.job_id)) == rows_before
    assert attempt_row(engine, last).outcome == "dead"


def test_permanent_failure_is_failed_with_the_error_kept(engine: Engine, clock: FakeClock) -> None:
    held = running(engine)
    assert fail(engine, clock, held, permanent=True).state is State.FAILED
    job = job_row(engine, held.job_id)
    assert (job.state, job.error_code, job.error_message) == (State.FAILED, "flaky", "upstream timed out")
    assert len(outbox_rows(engine, held.job_id)) == 1
    assert attempt_row(engine, held).outcome == "failed"


def test_transient_failure_after_a_cancel_request_is_cancelled_not_retried(
    engine: Engine, clock: FakeClock
) -> None:
    held = running(engine)
    cancel(engine, clock, held.job_id)
    assert fail(engine, clock, held).state is State.CANCELLED
    assert job_row(engine, held.job_id).state is State.CANCELLED
    assert len(outbox_rows(engine, held.job_id)) == 1


# release


def test_release_gives_the_job_back_at_once_without_counting_the_attempt(
    engine: Engine, clock: FakeClock
) -> None:
    held = running(engine)
    clock.advance(1)
    db.transact(engine, fenced.release, held.job_id, held.epoch, held.attempt_id, clock.now())
    job = job_row(engine, held.job_id)
    assert (job.state, job.attempts, job.epoch, job.available_at) == (
        State.QUEUED,
        0,
        held.epoch,
        clock.now(),
    )
    assert (job.lease_owner, job.lease_expires_at) == (None, None)
    assert outbox_rows(engine, held.job_id)[-1]["available_at"] == clock.now()
    assert attempt_row(engine, held).outcome == "released"
    again = claimed(engine, held.job_id, worker="w2")
    assert (again.epoch, again.attempts) == (held.epoch + 1, 1)


def test_release_after_an_external_effect_started_is_refused(engine: Engine, clock: FakeClock) -> None:
    held = running(engine)
    db.transact(engine, fenced.mark_external_started, held.job_id, held.epoch, held.attempt_id, clock.now())
    with pytest.raises(Fenced):
        db.transact(engine, fenced.release, held.job_id, held.epoch, held.attempt_id, clock.now())
    assert job_row(engine, held.job_id).state is State.RUNNING


def test_release_after_a_cancel_request_ends_cancelled_instead_of_stuck_in_the_queue(
    engine: Engine, clock: FakeClock
) -> None:
    held = running(engine)
    cancel(engine, clock, held.job_id)
    db.transact(engine, fenced.release, held.job_id, held.epoch, held.attempt_id, clock.now())
    job = job_row(engine, held.job_id)
    assert (job.state, job.error_code, job.finished_at) == (State.CANCELLED, "cancelled", clock.now())
    assert [r["published_at"] is None for r in outbox_rows(engine, held.job_id)] == [True]
    assert attempt_row(engine, held).outcome == "cancelled"
