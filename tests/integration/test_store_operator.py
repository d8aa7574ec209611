"""The operator's transitions: cancel, requeue (failed/dead/unknown -> queued, one job or every job a filter
names) and resolve (unknown -> succeeded/failed), each recorded with who did it, when and why."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, delete, func, select

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, fenced, intake, operator, queries, sweeper
from outbox_bridge.jobstore.errors import InvalidTransition, JobNotFound
from outbox_bridge.jobstore.filters import NOTHING, JobFilter
from outbox_bridge.jobstore.records import Claim, Job
from outbox_bridge.jobstore.schema import jobs, outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, claimed, every_row, job_row, new_job, new_jobs

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
    job_id = new_job(engine, intake.new_id(), max_attempts=1)
    fail(engine, clock, claimed(engine, job_id), permanent=False)
    return job_id


def unknown_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, intake.new_id())
    held = claimed(engine, job_id)
    db.transact(engine, fenced.mark_external_started, job_id, held.epoch, held.attempt_id, clock.now())
    clock.advance(LEASE)
    assert db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF) == {"unknown": 1}
    return job_id


def queued_job(engine: Engine, clock: FakeClock) -> str:
    return new_job(engine, intake.new_id())


def running_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, intake.new_id())
    claimed(engine, job_id)
    return job_id


def succeeded_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, intake.new_id())
    held = claimed(engine, job_id)
    db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {"sent": True}, clock.now())
    return job_id


def failed_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, intake.new_id())
    fail(engine, clock, claimed(engine, job_id), permanent=True)
    return job_id


def actions(engine: Engine, job_id: str) -> list[tuple[str, str, str | None, float]]:
    """(action, actor, note, at) of every recorded operator action on the job, oldest first."""
    found = db.read(engine, queries.actions_of, job_id)
    return [(a.action, a.actor, a.note, a.at) for a in found]


def pending_deliveries(engine: Engine, job_id: str) -> int:
    query = select(func.count()).where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
    return int(db.read(engine, lambda conn: conn.execute(query).scalar_one()))


def cancelled_job(engine: Engine, clock: FakeClock) -> str:
    job_id = new_job(engine, intake.new_id())
    db.transact(engine, operator.request_cancel, job_id, clock.now())
    return job_id


JobIn = Callable[[Engine, FakeClock], str]
NOT_REQUEUEABLE: dict[str, JobIn] = {
    "queued": queued_job,
    "running": running_job,
    "succeeded": succeeded_job,
    "cancelled": cancelled_job,
}
NOT_RESOLVABLE: dict[str, JobIn] = {**NOT_REQUEUEABLE, "dead": dead_job, "failed": failed_job}


# requeue


def test_requeue_of_a_dead_job_gives_a_fresh_budget_and_a_new_delivery(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = dead_job(engine, clock)
    died_at = job_row(engine, job_id)
    clock.advance(60)
    job = db.transact(engine, operator.requeue, job_id, clock.now(), actor="ops")
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
    job = db.transact(engine, operator.requeue, job_id, clock.now(), actor="ops")
    assert (job.state, job.external_epoch, job.attempts) == (State.QUEUED, None, 0)
    again = claimed(engine, job_id)
    clock.advance(LEASE)
    assert db.transact(engine, sweeper.sweep_expired, clock.now(), backoff=BACKOFF) == {"queued": 1}
    assert again.epoch == 2


@pytest.mark.parametrize("state", list(NOT_REQUEUEABLE))
def test_requeue_of_a_job_that_is_not_failed_dead_or_unknown_is_refused(
    engine: Engine, clock: FakeClock, state: str
) -> None:
    job_id = NOT_REQUEUEABLE[state](engine, clock)
    before = every_row(engine)
    with pytest.raises(InvalidTransition) as refused:
        db.transact(engine, operator.requeue, job_id, clock.now(), actor="ops")
    assert (refused.value.state, refused.value.action) == (state, "requeue")
    assert every_row(engine) == before


def test_requeue_of_an_unknown_id_is_not_found(engine: Engine, clock: FakeClock) -> None:
    with pytest.raises(JobNotFound):
        db.transact(engine, operator.requeue, "no-such-job", clock.now(), actor="ops")


# resolve


def resolve(engine: Engine, job_id: str, outcome: State, note: str, now: float) -> Job:
    return db.transact(engine, operator.resolve, job_id, outcome, note, now, actor="ops")


def test_resolve_as_succeeded_reads_as_succeeded_with_the_note_recorded_not_an_error(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = unknown_job(engine, clock)
    clock.advance(5)
    job = resolve(engine, job_id, State.SUCCEEDED, "provider log shows delivery", clock.now())
    assert (job.state, job.error_code, job.error_message, job.finished_at) == (
        State.SUCCEEDED,
        None,
        None,
        clock.now(),
    )
    assert job.result_attempt_id is None, "no attempt committed a result"
    assert job_row(engine, job_id) == job
    assert actions(engine, job_id) == [
        ("resolve_succeeded", "ops", "provider log shows delivery", clock.now())
    ]


def test_resolve_as_failed_carries_the_note_as_its_error(engine: Engine, clock: FakeClock) -> None:
    job_id = unknown_job(engine, clock)
    job = resolve(engine, job_id, State.FAILED, "provider never saw it", clock.now())
    assert (job.state, job.error_code) == (State.FAILED, "resolved_failed")
    assert job.error_message == "resolved by operator: provider never saw it"
    assert actions(engine, job_id) == [("resolve_failed", "ops", "provider never saw it", clock.now())]


@pytest.mark.parametrize("state", list(NOT_RESOLVABLE))
def test_resolve_of_a_job_that_is_not_unknown_is_refused(
    engine: Engine, clock: FakeClock, state: str
) -> None:
    job_id = NOT_RESOLVABLE[state](engine, clock)
    before = every_row(engine)
    with pytest.raises(InvalidTransition) as refused:
        resolve(engine, job_id, State.SUCCEEDED, "note", clock.now())
    assert (refused.value.state, refused.value.action) == (state, "resolve")
    assert every_row(engine) == before


@pytest.mark.parametrize("outcome", [State.QUEUED, State.CANCELLED, State.DEAD, State.UNKNOWN])
def test_resolve_to_anything_but_succeeded_or_failed_is_rejected(
    engine: Engine, clock: FakeClock, outcome: State
) -> None:
    job_id = unknown_job(engine, clock)
    before = every_row(engine)
    with pytest.raises(ValueError, match="succeeded or failed"):
        resolve(engine, job_id, outcome, "note", clock.now())
    assert every_row(engine) == before


def test_resolve_of_an_unknown_id_is_not_found(engine: Engine, clock: FakeClock) -> None:
    with pytest.raises(JobNotFound):
        resolve(engine, "no-such-job", State.FAILED, "note", clock.now())


# who did it


def test_requeue_records_who_requeued_when_and_why(engine: Engine, clock: FakeClock) -> None:
    job_id = dead_job(engine, clock)
    db.transact(engine, operator.requeue, job_id, clock.now(), actor="ana", note="fixed the bucket")
    clock.advance(30)
    db.transact(engine, operator.request_cancel, job_id, clock.now())  # a tenant's cancel: not an operator's
    assert actions(engine, job_id) == [("requeue", "ana", "fixed the bucket", clock.now() - 30)]


def test_requeue_of_a_failed_job_gives_it_another_run(engine: Engine, clock: FakeClock) -> None:
    job_id = failed_job(engine, clock)
    before = pending_deliveries(engine, job_id)
    job = db.transact(engine, operator.requeue, job_id, clock.now(), actor="ops")
    assert (job.state, job.attempts, job.error_code) == (State.QUEUED, 0, None)
    assert pending_deliveries(engine, job_id) == before + 1
    assert claimed(engine, job_id).epoch == 2


# cancel


def test_operator_cancel_of_a_queued_job_cancels_it_and_records_it(engine: Engine, clock: FakeClock) -> None:
    job_id = queued_job(engine, clock)
    assert pending_deliveries(engine, job_id) == 1
    outcome, job = db.transact(engine, operator.cancel, job_id, clock.now(), actor="ana", note="duplicate")
    assert (outcome, job.state) == (operator.CancelOutcome.CANCELLED, State.CANCELLED)
    assert pending_deliveries(engine, job_id) == 0
    assert actions(engine, job_id) == [("cancel", "ana", "duplicate", clock.now())]


def test_operator_cancel_of_a_running_job_requests_it_and_records_the_request(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = running_job(engine, clock)
    outcome, job = db.transact(engine, operator.cancel, job_id, clock.now(), actor="ana")
    assert (outcome, job.state, job.cancel_requested) == (
        operator.CancelOutcome.REQUESTED,
        State.RUNNING,
        True,
    )
    assert actions(engine, job_id) == [("request_cancel", "ana", None, clock.now())]


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled"])
def test_operator_cancel_of_a_finished_job_is_refused_and_records_nothing(
    engine: Engine, clock: FakeClock, state: str
) -> None:
    job_id = {"succeeded": succeeded_job, "failed": failed_job, "cancelled": cancelled_job}[state](
        engine, clock
    )
    before = every_row(engine)
    with pytest.raises(InvalidTransition) as refused:
        db.transact(engine, operator.cancel, job_id, clock.now(), actor="ana")
    assert (refused.value.state, refused.value.action) == (state, "cancel")
    assert every_row(engine) == before


def test_operator_cancel_of_an_unknown_id_is_not_found(engine: Engine, clock: FakeClock) -> None:
    with pytest.raises(JobNotFound):
        db.transact(engine, operator.cancel, "no-such-job", clock.now(), actor="ana")


# requeue by filter


def test_requeue_matching_moves_only_the_matching_jobs_each_with_a_record_and_a_delivery(
    engine: Engine, clock: FakeClock
) -> None:
    wanted = [dead_job(engine, clock) for _ in range(3)]
    other_tenant = new_job(engine, "other", tenant="globex", max_attempts=1)
    fail(engine, clock, claimed(engine, other_tenant), permanent=False)
    failed = failed_job(engine, clock)
    queued = queued_job(engine, clock)
    matching = JobFilter(states=frozenset({State.DEAD}), kind="noop", tenant="acme")
    before = every_row(engine)
    delivered = {job_id: pending_deliveries(engine, job_id) for job_id in wanted}

    assert db.read(engine, operator.count_requeueable, matching) == 3
    assert every_row(engine) == before, "counting writes nothing"
    moved = db.transact(engine, operator.requeue_matching, matching, clock.now(), actor="ana", note="bulk")

    assert moved == sorted(wanted)
    for job_id in wanted:
        assert job_row(engine, job_id).state is State.QUEUED
        assert pending_deliveries(engine, job_id) == delivered[job_id] + 1
        assert actions(engine, job_id) == [("requeue", "ana", "bulk", clock.now())]
    assert job_row(engine, other_tenant).state is State.DEAD
    assert job_row(engine, failed).state is State.FAILED
    assert job_row(engine, queued).state is State.QUEUED and actions(engine, queued) == []
    assert db.read(engine, operator.count_requeueable, matching) == 0


def test_requeue_matching_without_a_state_takes_every_requeueable_state(
    engine: Engine, clock: FakeClock
) -> None:
    requeueable = {dead_job(engine, clock), failed_job(engine, clock), unknown_job(engine, clock)}
    left = {queued_job(engine, clock), running_job(engine, clock), succeeded_job(engine, clock)}
    assert db.read(engine, operator.count_requeueable, JobFilter()) == 3
    moved = db.transact(engine, operator.requeue_matching, JobFilter(), clock.now(), actor="ops")
    assert set(moved) == requeueable
    assert all(actions(engine, job_id) == [] for job_id in left)


def test_requeue_matching_since_takes_only_jobs_that_changed_at_or_after_it(
    engine: Engine, clock: FakeClock
) -> None:
    old = dead_job(engine, clock)
    clock.advance(7200)
    recent = dead_job(engine, clock)
    matching = JobFilter(states=frozenset({State.DEAD}), since=clock.now() - 3600)
    assert db.read(engine, operator.count_requeueable, matching) == 1
    assert db.transact(engine, operator.requeue_matching, matching, clock.now(), actor="ops") == [recent]
    assert job_row(engine, old).state is State.DEAD


def test_requeue_matching_nothing_writes_nothing(engine: Engine, clock: FakeClock) -> None:
    new_jobs(engine, 3)
    before = every_row(engine)
    assert db.transact(engine, operator.requeue_matching, JobFilter(), clock.now(), actor="ops") == []
    assert every_row(engine) == before


@pytest.mark.parametrize("state", [State.QUEUED, State.RUNNING, State.SUCCEEDED, State.CANCELLED])
def test_requeue_matching_a_state_no_job_leaves_by_requeue_is_refused(
    engine: Engine, clock: FakeClock, state: State
) -> None:
    matching = JobFilter(states=frozenset({State.DEAD, state}))
    with pytest.raises(ValueError, match=f"not {state.value}"):
        db.read(engine, operator.count_requeueable, matching)
    with pytest.raises(ValueError, match=f"not {state.value}"):
        db.transact(engine, operator.requeue_matching, matching, clock.now(), actor="ops")


def test_operator_actions_go_with_their_job(engine: Engine, clock: FakeClock) -> None:
    job_id = dead_job(engine, clock)
    db.transact(engine, operator.requeue, job_id, clock.now(), actor="ops")
    db.transact(engine, lambda conn: conn.execute(delete(jobs).where(jobs.c.id == job_id)))
    assert actions(engine, job_id) == []


def test_the_nothing_filter_matches_no_job(engine: Engine, clock: FakeClock) -> None:
    dead_job(engine, clock)
    assert db.read(engine, queries.count_jobs, NOTHING) == 0
    assert db.read(engine, queries.count_jobs, JobFilter()) == 1
