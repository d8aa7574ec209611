"""claim_many and complete_many: many jobs in a few statements, with the same guards and the same outcomes as
claiming and completing them one after another."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, select

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, fenced, operator
from outbox_bridge.jobstore.records import Claim, dumps
from outbox_bridge.jobstore.schema import attempts, jobs
from outbox_bridge.jobstore.states import State
from tests.support.store import new_job, new_jobs

LEASE = 30.0


def claim_many(engine: Engine, clock: FakeClock, job_ids: list[str], worker: str = "w") -> list[Any]:
    return db.transact(engine, claiming.claim_many, job_ids, worker, clock.now(), LEASE)


def complete_many(engine: Engine, clock: FakeClock, claims: list[Claim]) -> list[State | None]:
    finishing = [fenced.Completion(c.job_id, c.epoch, c.attempt_id, {"done": c.job_id}) for c in claims]
    return db.transact(engine, fenced.complete_many, finishing, clock.now())


def attempt_rows(engine: Engine) -> dict[tuple[str, int], tuple[str, str, str | None]]:
    def fetch(conn: Connection) -> dict[tuple[str, int], tuple[str, str, str | None]]:
        rows = conn.execute(select(attempts)).mappings()
        return {(r["job_id"], r["epoch"]): (r["id"], r["outcome"], r["output"]) for r in rows}

    return db.read(engine, fetch)


def result_pointer(engine: Engine, job_id: str) -> str | None:
    query = select(jobs.c.result_attempt_id).where(jobs.c.id == job_id)
    return db.read(engine, lambda conn: conn.execute(query).scalar_one())


def test_claim_many_takes_each_claimable_job_once_and_says_why_it_refused_the_others(
    engine: Engine, clock: FakeClock
) -> None:
    first, second, done = (new_job(engine, key) for key in ("a", "b", "c"))
    (finished,) = [r.claim for r in claim_many(engine, clock, [done])]
    assert finished is not None
    assert complete_many(engine, clock, [finished]) == [State.SUCCEEDED]

    results = claim_many(engine, clock, [first, second, first, "no-such-job", done])

    assert [r.refusal for r in results] == [
        None,
        None,
        claiming.Refusal.LEASED,
        claiming.Refusal.NOT_FOUND,
        claiming.Refusal.TERMINAL,
    ]
    claims = [r.claim for r in results[:2]]
    assert [(c.job_id, c.epoch, c.attempts, c.worker) for c in claims if c] == [
        (first, 1, 1, "w"),
        (second, 1, 1, "w"),
    ]
    rows = attempt_rows(engine)
    assert {rows[(c.job_id, 1)][:2] for c in claims if c} == {(c.attempt_id, "running") for c in claims if c}


def test_claim_many_of_an_expired_lease_ends_the_previous_attempt_as_lost(
    engine: Engine, clock: FakeClock
) -> None:
    job_id = new_job(engine, "a")
    (old,) = [r.claim for r in claim_many(engine, clock, [job_id], worker="gone")]
    assert old is not None
    clock.advance(LEASE + 1)
    (new,) = [r.claim for r in claim_many(engine, clock, [job_id], worker="next")]
    assert new is not None and new.epoch == 2
    rows = attempt_rows(engine)
    assert rows[(job_id, 1)][1] == "lost"
    assert rows[(job_id, 2)][:2] == (new.attempt_id, "running")


def test_complete_many_completes_each_under_its_own_fence_and_leaves_the_fenced_one_untouched(
    engine: Engine, clock: FakeClock
) -> None:
    ok, stale, cancel = (new_job(engine, key) for key in ("ok", "stale", "cancel"))
    claims = {c.job_id: c for c in (r.claim for r in claim_many(engine, clock, [ok, stale, cancel])) if c}
    clock.advance(LEASE / 2)
    for c in (claims[ok], claims[cancel]):
        db.transact(engine, fenced.renew_lease, c.job_id, c.epoch, clock.now(), LEASE)
    clock.advance(LEASE / 2 + 1)  # the stale one's lease runs out and another worker takes it
    (taken_over,) = [r.claim for r in claim_many(engine, clock, [stale], worker="other")]
    assert taken_over is not None
    db.transact(engine, operator.request_cancel, cancel, clock.now())

    states = complete_many(engine, clock, [claims[ok], claims[stale], claims[cancel]])

    assert states == [State.SUCCEEDED, None, State.CANCELLED]
    assert result_pointer(engine, ok) == claims[ok].attempt_id
    assert result_pointer(engine, cancel) is None
    assert result_pointer(engine, stale) is None
    rows = attempt_rows(engine)
    assert rows[(ok, 1)][1:] == ("succeeded", dumps({"done": ok}))
    assert rows[(cancel, 1)][1] == "cancelled"
    assert rows[(stale, 1)][1:] == ("lost", None), "the fenced attempt's output was not written"
    assert rows[(stale, 2)][1] == "running"


def test_batches_whose_sizes_are_filled_up_claim_and_complete_each_job_once(
    engine: Engine, clock: FakeClock
) -> None:
    # 11 jobs, a length of list no power of two: whatever the length of the list, each job is taken and
    # completed once.
    job_ids = new_jobs(engine, 11)
    results = claim_many(engine, clock, job_ids)
    claims = [r.claim for r in results]
    assert all(c is not None for c in claims) and len({c.attempt_id for c in claims}) == 11
    assert complete_many(engine, clock, claims) == [State.SUCCEEDED] * 11
    assert len(attempt_rows(engine)) == 11, "one attempt each"
