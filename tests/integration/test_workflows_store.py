"""Workflows in the store, on each database: a job that waits for others becomes due (with its outbox row) in
the transaction that ends the last one it waits for, is cancelled when one of them does not succeed (and so
are its own dependents), or runs anyway when it asked so; a batch is done, with its callback job accepted,
in the transaction that ends its last member, once, also when its last two members end at once in two
transactions."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import Engine, select

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, fenced, intake, operator, workflows
from outbox_bridge.jobstore.claiming import claim
from outbox_bridge.jobstore.schema import WAITING_AT, jobs, outbox
from outbox_bridge.jobstore.states import State
from outbox_bridge.jobstore.workflows import After, Member
from tests.support.store import LEASE, claimed, job_row, new_job

BACKOFF = Backoff(1.0, 1.0)


def prepared(clock: FakeClock, key: str, kind: str = "noop", **fields: Any) -> intake.Prepared:
    return intake.prepare(
        tenant="acme", owner="alice", kind=kind, payload={}, operation_key=key, now=clock.now(),
        max_attempts=1, **fields,
    )  # fmt: skip


def after(engine: Engine, clock: FakeClock, key: str, ids: list[str], on_failure: str = "cancel") -> str:
    p = prepared(clock, key)
    accepted = db.transact(engine, workflows.accept_after, p, After(tuple(ids), on_failure))  # type: ignore[arg-type]
    return accepted.job.id


def succeed(engine: Engine, clock: FakeClock, job_id: str) -> State:
    held = claimed(engine, job_id, now=clock.now())
    return db.transact(engine, fenced.complete, job_id, held.epoch, held.attempt_id, {}, clock.now())


def fail(engine: Engine, clock: FakeClock, job_id: str) -> None:
    held = claimed(engine, job_id, now=clock.now())
    db.transact(
        engine, fenced.fail, job_id, held.epoch, held.attempt_id, code="boom", message="boom", permanent=True,
        now=clock.now(), backoff=BACKOFF,
    )  # fmt: skip


def pending_outbox(engine: Engine, job_id: str) -> int:
    query = select(outbox.c.id).where(outbox.c.job_id == job_id, outbox.c.published_at.is_(None))
    return len(db.read(engine, lambda conn: conn.execute(query).all()))


def waiting(engine: Engine, job_id: str) -> list[str]:
    return db.read(engine, workflows.waiting_for, [job_id]).get(job_id, [])


def test_a_job_waits_without_an_outbox_row_and_is_due_when_the_last_it_waits_for_succeeds(
    engine: Engine, clock: FakeClock
) -> None:
    first, second = new_job(engine, "a"), new_job(engine, "b")
    then = after(engine, clock, "then", [first, second])
    job = job_row(engine, then)
    assert (job.state, job.available_at) == (State.QUEUED, WAITING_AT)
    assert pending_outbox(engine, then) == 0 and sorted(waiting(engine, then)) == sorted([first, second])
    assert db.transact(engine, claim, then, "w1", clock.now(), LEASE).claim is None

    clock.advance(1)
    succeed(engine, clock, first)
    assert job_row(engine, then).available_at == WAITING_AT and waiting(engine, then) == [second]
    clock.advance(1)
    succeed(engine, clock, second)
    job = job_row(engine, then)
    assert (job.state, job.available_at) == (State.QUEUED, clock.now())
    assert pending_outbox(engine, then) == 1 and waiting(engine, then) == []
    assert succeed(engine, clock, then) is State.SUCCEEDED


def test_a_failed_dependency_cancels_its_dependents_and_theirs_unless_one_asked_to_run(
    engine: Engine, clock: FakeClock
) -> None:
    first = new_job(engine, "a")
    cancelled = after(engine, clock, "cancelled", [first])
    below = after(engine, clock, "below", [cancelled])
    runs = after(engine, clock, "runs", [first], on_failure="run")
    clock.advance(1)
    fail(engine, clock, first)
    for job_id in (cancelled, below):
        job = job_row(engine, job_id)
        assert (job.state, job.error_code) == (State.CANCELLED, "dependency_failed"), job_id
        assert job.finished_at == clock.now()
    job = job_row(engine, runs)
    assert (job.state, job.available_at, pending_outbox(engine, runs)) == (State.QUEUED, clock.now(), 1)


def test_after_a_job_already_ended_the_new_job_starts_as_that_ending_says(
    engine: Engine, clock: FakeClock
) -> None:
    done, failed = new_job(engine, "done"), new_job(engine, "failed")
    succeed(engine, clock, done)
    fail(engine, clock, failed)
    due = after(engine, clock, "due", [done])
    assert (job_row(engine, due).state, pending_outbox(engine, due)) == (State.QUEUED, 1)
    gone = after(engine, clock, "gone", [done, failed])
    assert (job_row(engine, gone).state, job_row(engine, gone).error_code) == (
        State.CANCELLED,
        "dependency_failed",
    )
    assert pending_outbox(engine, gone) == 0
    with pytest.raises(workflows.UnknownDependencies):
        after(engine, clock, "unknown", [done, "no-such-job"])
    assert (
        db.read(
            engine,
            lambda conn: conn.execute(select(jobs.c.id).where(jobs.c.operation_key == "unknown")).all(),
        )
        == []
    )


def test_a_requeued_dependency_that_ends_again_counts_once(engine: Engine, clock: FakeClock) -> None:
    first, second = new_job(engine, "a"), new_job(engine, "b")
    runs = after(engine, clock, "runs", [first, second], on_failure="run")
    fail(engine, clock, first)
    db.transact(engine, operator.requeue, first, clock.now(), actor="ops", note="again")
    clock.advance(1)
    succeed(engine, clock, first)
    assert job_row(engine, runs).available_at == WAITING_AT and waiting(engine, runs) == [second]


def members(clock: FakeClock, count: int) -> list[Member]:
    return [Member(prepared(clock, f"m{i}")) for i in range(count)]


def accept_batch(engine: Engine, clock: FakeClock, key: str, count: int) -> workflows.BatchAccepted:
    return db.transact(
        engine, workflows.accept_batch, tenant="acme", owner="alice", operation_key=key,
        members=members(clock, count), callback=prepared(clock, "callback"), now=clock.now(),
    )  # fmt: skip


def test_a_batch_is_done_with_its_callback_when_its_last_member_ends(
    engine: Engine, clock: FakeClock
) -> None:
    accepted = accept_batch(engine, clock, "batch-1", 3)
    batch = accepted.batch
    assert (batch.state, batch.callback_job_id, batch.counts) == ("running", None, {"queued": 3})
    again = accept_batch(engine, clock, "batch-1", 3)
    assert (again.created, again.batch.id) == (False, batch.id)
    ids = list(batch.jobs)
    succeed(engine, clock, ids[0])
    fail(engine, clock, ids[1])
    assert db.read(engine, workflows.get_batch, batch.id).state == "running"
    clock.advance(1)
    succeed(engine, clock, ids[2])
    done = db.read(engine, workflows.get_batch, batch.id)
    assert (done.state, done.done_at, done.counts) == ("done", clock.now(), {"succeeded": 2, "failed": 1})
    assert done.callback_job_id is not None
    callback = job_row(engine, done.callback_job_id)
    assert (callback.state, callback.created_at, callback.available_at) == (
        State.QUEUED,
        clock.now(),
        clock.now(),
    )
    assert pending_outbox(engine, callback.id) == 1
    assert db.read(engine, workflows.callbacks_of, [callback.id]) == {callback.id: batch.id}


@pytest.mark.parametrize("attempt", range(3))
def test_the_last_two_members_ended_at_once_in_two_transactions_make_one_callback(
    engine: Engine, clock: FakeClock, attempt: int
) -> None:
    batch = accept_batch(engine, clock, f"race-{attempt}", 2).batch
    held = [claimed(engine, job_id, worker=f"w{i}", now=clock.now()) for i, job_id in enumerate(batch.jobs)]
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def end(i: int) -> None:
        try:
            start.wait()
            h = held[i]
            db.transact(engine, fenced.complete, h.job_id, h.epoch, h.attempt_id, {}, clock.now())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=end, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    done = db.read(engine, workflows.get_batch, batch.id)
    assert done.state == "done" and done.callback_job_id is not None
    callbacks = db.read(
        engine,
        lambda conn: conn.execute(
            select(jobs.c.id).where(jobs.c.kind == "noop", jobs.c.operation_key.like("batch:%:callback"))
        ).all(),
    )
    assert [row[0] for row in callbacks] == [done.callback_job_id]


def test_the_retention_keeps_the_members_of_a_running_batch_and_deletes_a_batch_done_long_ago(
    engine: Engine, clock: FakeClock
) -> None:
    from outbox_bridge.jobstore import retention

    batch = accept_batch(engine, clock, "kept", 2).batch
    first, second = list(batch.jobs)
    succeed(engine, clock, first)
    clock.advance(100)
    assert db.transact(engine, retention.prune, clock.now()) == []  # its batch still runs
    succeed(engine, clock, second)
    clock.advance(100)
    done = db.read(engine, workflows.get_batch, batch.id)
    assert done.state == "done"
    pruned = db.transact(engine, retention.prune, clock.now())
    assert set(pruned) == {first, second}
    assert db.read(engine, workflows.get_batch, batch.id) is None


def test_a_member_or_a_waiting_job_of_a_kind_with_a_uniqueness_window_is_a_job_of_its_own(
    engine: Engine, clock: FakeClock
) -> None:
    unique = [Member(prepared(clock, f"u{i}", unique_for_seconds=3600)) for i in range(2)]
    accepted = db.transact(
        engine, workflows.accept_batch, tenant="acme", owner="alice", operation_key="unique-batch",
        members=unique, callback=None, now=clock.now(),
    )  # fmt: skip
    assert len(set(accepted.batch.jobs)) == 2
    first = new_job(engine, "first")
    p = prepared(clock, "waits", unique_for_seconds=3600)
    waits = db.transact(engine, workflows.accept_after, p, After((first,)))
    assert waits.created and waiting(engine, waits.job.id) == [first]
