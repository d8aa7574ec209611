"""claim and claim_next: a claim grows the epoch and the attempt count; a refusal says why, writes nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, fenced, operator
from outbox_bridge.jobstore import outbox as outbox_rows
from outbox_bridge.jobstore.schema import attempts, outbox
from outbox_bridge.jobstore.states import State
from tests.support.store import LEASE, accept, claimed, every_row, job_row, new_job, publish_due

BACKOFF = Backoff(base=5.0, cap=60.0)


def claim(engine: Engine, clock: FakeClock, job_id: str, worker: str = "w1") -> claiming.ClaimResult:
    return db.transact(engine, claiming.claim, job_id, worker, clock.now(), LEASE)


def pending_outbox(engine: Engine) -> list[str]:
    query = select(outbox.c.job_id).where(outbox.c.published_at.is_(None)).order_by(outbox.c.id)
    return db.read(engine, lambda conn: list(conn.execute(query).scalars()))


def assert_refused(
    engine: Engine, clock: FakeClock, job_id: str, refusal: claiming.Refusal
) -> claiming.ClaimResult:
    before = every_row(engine)
    result = claim(engine, clock, job_id, worker="intruder")
    assert (result.claim, result.refusal) == (None, refusal)
    assert every_row(engine) == before
    return result


def test_claim_takes_a_queued_job_with_the_next_epoch_a_lease_and_an_attempt_row(
    engine: Engine, clock: FakeClock
) -> None:
    job = accept(engine).job
    clock.advance(1)
    got = claimed(engine, job.id, worker="w1")
    row = job_row(engine, job.id)
    assert (got.epoch, got.attempts, got.worker, got.lease_expires_at) == (1, 1, "w1", clock.now() + LEASE)
    assert (row.state, row.epoch, row.attempts, row.lease_owner) == (State.RUNNING, 1, 1, "w1")
    assert row.lease_expires_at == clock.now() + LEASE and row.started_at == clock.now()
    [attempt] = db.read(engine, lambda conn: conn.execute(select(attempts)).mappings().all())
    assert (attempt["id"], attempt["job_id"], attempt["epoch"]) == (got.attempt_id, job.id, 1)
    assert (attempt["worker"], attempt["outcome"], attempt["started_at"]) == ("w1", "running", clock.now())


def test_claim_of_an_unknown_job_is_refused_as_not_found(engine: Engine, clock: FakeClock) -> None:
    assert_refused(engine, clock, "no-such-job", claiming.Refusal.NOT_FOUND)


def test_claim_of_a_finished_job_is_refused_as_terminal(engine: Engine, clock: FakeClock) -> None:
    job = accept(engine).job
    got = claimed(engine, job.id)
    db.transact(engine, fenced.complete, job.id, got.epoch, got.attempt_id, {"ok": True}, clock.now())
    result = assert_refused(engine, clock, job.id, claiming.Refusal.TERMINAL)
    assert result.state is State.SUCCEEDED


def test_claim_of_a_live_lease_is_refused_as_leased(engine: Engine, clock: FakeClock) -> None:
    job = accept(engine).job
    claimed(engine, job.id, worker="w1")
    clock.advance(LEASE - 0.001)
    result = assert_refused(engine, clock, job.id, claiming.Refusal.LEASED)
    assert result.state is State.RUNNING


def test_claim_during_a_retry_backoff_is_refused_as_not_available(engine: Engine, clock: FakeClock) -> None:
    job = accept(engine).job
    got = claimed(engine, job.id)
    db.transact(
        engine,
        fenced.fail,
        job.id,
        got.epoch,
        got.attempt_id,
        code="flaky",
        message="try again",
        permanent=False,
        now=clock.now(),
        backoff=BACKOFF,
    )
    assert_refused(engine, clock, job.id, claiming.Refusal.NOT_AVAILABLE)
    clock.set(job_row(engine, job.id).available_at)
    assert claimed(engine, job.id).epoch == 2


def test_claim_of_an_expired_lease_after_an_external_effect_needs_a_sweep(
    engine: Engine, clock: FakeClock
) -> None:
    job = accept(engine).job
    got = claimed(engine, job.id)
    db.transact(engine, fenced.mark_external_started, job.id, got.epoch, got.attempt_id, clock.now())
    clock.advance(LEASE)
    assert_refused(engine, clock, job.id, claiming.Refusal.NEEDS_SWEEP)


def test_claim_of_an_expired_lease_with_the_budget_spent_needs_a_sweep(
    engine: Engine, clock: FakeClock
) -> None:
    job = accept(engine, max_attempts=1).job
    claimed(engine, job.id)
    clock.advance(LEASE)
    assert_refused(engine, clock, job.id, claiming.Refusal.NEEDS_SWEEP)


def test_claim_of_an_expired_lease_with_a_cancel_request_needs_a_sweep(
    engine: Engine, clock: FakeClock
) -> None:
    job = accept(engine).job
    claimed(engine, job.id)
    db.transact(engine, operator.request_cancel, job.id, clock.now())
    clock.advance(LEASE)
    assert_refused(engine, clock, job.id, claiming.Refusal.NEEDS_SWEEP)


def test_claim_of_a_queued_job_past_its_deadline_needs_a_sweep(engine: Engine, clock: FakeClock) -> None:
    job = accept(engine, deadline=10).job
    clock.advance(10)
    assert_refused(engine, clock, job.id, claiming.Refusal.NEEDS_SWEEP)


def test_claim_of_an_expired_lease_takes_over_with_the_next_epoch_and_the_old_attempt_is_lost(
    engine: Engine, clock: FakeClock
) -> None:
    job = accept(engine).job
    first = claimed(engine, job.id, worker="w1")
    clock.advance(LEASE)
    second = claimed(engine, job.id, worker="w2")
    assert (second.epoch, second.attempts) == (first.epoch + 1, 2)
    outcomes = db.read(
        engine,
        lambda conn: conn.execute(
            select(attempts.c.epoch, attempts.c.outcome).order_by(attempts.c.epoch)
        ).all(),
    )
    assert [tuple(r) for r in outcomes] == [(1, "lost"), (2, "running")]
    assert job_row(engine, job.id).lease_owner == "w2"


def test_claim_checkpoint_carries_the_last_saved_progress(engine: Engine, clock: FakeClock) -> None:
    job = accept(engine).job
    first = claimed(engine, job.id)
    db.transact(engine, fenced.save_checkpoint, job.id, first.epoch, {"step": 2}, clock.now())
    clock.advance(LEASE)
    assert claimed(engine, job.id).checkpoint == {"step": 2}


def test_claim_next_takes_the_oldest_available_job_first(engine: Engine, clock: FakeClock) -> None:
    ids = []
    for key in ("a", "b", "c"):
        ids.append(new_job(engine, key))
        clock.advance(1)
    taken = [db.transact(engine, claiming.claim_next, "w", clock.now(), LEASE) for _ in range(4)]
    assert [c.job_id if c else None for c in taken] == [*ids, None]


def test_claim_next_skips_a_job_still_waiting_out_its_backoff(engine: Engine, clock: FakeClock) -> None:
    waiting = accept(engine, "waiting").job
    got = claimed(engine, waiting.id)
    db.transact(
        engine,
        fenced.fail,
        waiting.id,
        got.epoch,
        got.attempt_id,
        code="flaky",
        message="again",
        permanent=False,
        now=clock.now(),
        backoff=BACKOFF,
    )
    assert db.transact(engine, claiming.claim_next, "w", clock.now(), LEASE) is None
    fresh = accept(engine, "fresh").job
    taken = db.transact(engine, claiming.claim_next, "w", clock.now(), LEASE)
    assert taken is not None and taken.job_id == fresh.id


def test_claim_next_drops_only_the_claimed_jobs_pending_outbox_rows(engine: Engine, clock: FakeClock) -> None:
    first = accept(engine, "first").job
    published = publish_due(engine, limit=1)
    db.transact(
        engine, lambda conn: outbox_rows.add(conn, first.id, available_at=clock.now(), now=clock.now())
    )
    clock.advance(1)
    second = accept(engine, "second").job
    assert pending_outbox(engine) == [first.id, second.id]

    taken = db.transact(engine, claiming.claim_next, "w", clock.now(), LEASE)

    assert taken is not None and taken.job_id == first.id
    assert pending_outbox(engine) == [second.id]
    still_published = select(outbox.c.id).where(outbox.c.published_at.isnot(None))
    assert db.read(engine, lambda conn: list(conn.execute(still_published).scalars())) == published


def test_claim_due_drops_the_pending_outbox_rows_of_every_job_it_takes_and_only_theirs(
    engine: Engine, clock: FakeClock
) -> None:
    jobs = []
    for name in ("first", "second", "third"):
        jobs.append(accept(engine, name).job)
        clock.advance(1)
    assert pending_outbox(engine) == [job.id for job in jobs]

    taken = db.transact(engine, claiming.claim_due, "w", clock.now(), LEASE, 2)

    assert [claim.job_id for claim in taken] == [jobs[0].id, jobs[1].id]
    assert pending_outbox(engine) == [jobs[2].id]


def test_claim_next_takes_over_an_expired_lease(engine: Engine, clock: FakeClock) -> None:
    job = accept(engine).job
    first = claimed(engine, job.id, worker="w1")
    assert db.transact(engine, claiming.claim_next, "w2", clock.now(), LEASE) is None
    clock.advance(LEASE)
    taken = db.transact(engine, claiming.claim_next, "w2", clock.now(), LEASE)
    assert taken is not None
    assert (taken.job_id, taken.epoch, taken.worker) == (job.id, first.epoch + 1, "w2")


@pytest.mark.parametrize("max_attempts", [1, 2])
def test_claim_counts_every_attempt_against_the_budget(
    engine: Engine, clock: FakeClock, max_attempts: int
) -> None:
    job = accept(engine, max_attempts=max_attempts).job
    for n in range(1, max_attempts + 1):
        assert claimed(engine, job.id).attempts == n
        clock.advance(LEASE)
    assert_refused(engine, clock, job.id, claiming.Refusal.NEEDS_SWEEP)


def _claim_many(engine: Engine, clock: FakeClock, job_ids: list[str], worker: str) -> dict[str, str]:
    results = db.transact(engine, claiming.claim_many, job_ids, worker, clock.now(), LEASE)
    return {r.claim.job_id: r.claim.attempt_id for r in results if r.claim is not None}


def _attempt_rows(engine: Engine) -> set[tuple[str, str, int, str, str]]:
    columns = (attempts.c.id, attempts.c.job_id, attempts.c.epoch, attempts.c.worker, attempts.c.outcome)
    return {tuple(r) for r in db.read(engine, lambda conn: conn.execute(select(*columns)).all())}  # type: ignore[misc]


def test_claim_many_writes_each_claims_attempt_row_under_the_id_it_returns_first_time_and_again(
    engine: Engine, clock: FakeClock
) -> None:
    """On PostgreSQL a first claim's attempt rows are written by the claim's own statement, a second
    claim's after its previous attempt is ended as lost: both under the attempt ids the claims carry."""
    ids = [accept(engine, key=f"k{i}").job.id for i in range(3)]
    first = _claim_many(engine, clock, ids, "w1")
    assert set(first) == set(ids)
    assert _attempt_rows(engine) == {(first[j], j, 1, "w1", "running") for j in ids}
    clock.advance(LEASE)
    second = _claim_many(engine, clock, ids[:2], "w2")
    assert set(second) == set(ids[:2])
    assert _attempt_rows(engine) == (
        {(first[j], j, 1, "w1", "lost") for j in ids[:2]}
        | {(first[ids[2]], ids[2], 1, "w1", "running")}
        | {(second[j], j, 2, "w2", "running") for j in ids[:2]}
    )
