"""The outbox: relays lease due rows under a token; only the current token marks them published or gives
them back; published rows are pruned; the backlog counts what is due."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, outbox
from outbox_bridge.jobstore.schema import outbox as outbox_table
from tests.support.store import new_job

RELAY_LEASE = 30.0


def add_row(engine: Engine, clock: FakeClock, job_id: str, *, due_in: float = 0.0) -> None:
    db.transact(
        engine, lambda conn: outbox.add(conn, job_id, available_at=clock.now() + due_in, now=clock.now())
    )


def lease(engine: Engine, clock: FakeClock, limit: int = 100) -> outbox.Lease:
    return db.transact(engine, outbox.lease_batch, now=clock.now(), limit=limit, lease_seconds=RELAY_LEASE)


def ids(held: outbox.Lease) -> list[int]:
    return [row_id for row_id, _ in held.rows]


def mark(engine: Engine, clock: FakeClock, held: outbox.Lease, row_ids: list[int] | None = None) -> int:
    return db.transact(
        engine, outbox.mark_published, held.token, ids(held) if row_ids is None else row_ids, clock.now()
    )


def rows(engine: Engine) -> list[dict[str, Any]]:
    query = select(outbox_table).order_by(outbox_table.c.id)
    return db.read(engine, lambda conn: [dict(r) for r in conn.execute(query).mappings()])


def published(engine: Engine) -> list[int]:
    return [r["id"] for r in rows(engine) if r["published_at"] is not None]


def test_a_lease_takes_due_rows_oldest_first_up_to_its_limit(engine: Engine, clock: FakeClock) -> None:
    job_ids = []
    for key in ("a", "b", "c"):
        job_ids.append(new_job(engine, key))
        clock.advance(1)
    held = lease(engine, clock, limit=2)
    assert [job for _, job in held.rows] == job_ids[:2]
    leased = {r["id"]: r for r in rows(engine)}
    for row_id in ids(held):
        assert leased[row_id]["lease_token"] == held.token
        assert leased[row_id]["lease_expires_at"] == clock.now() + RELAY_LEASE
        assert leased[row_id]["publish_attempts"] == 1


def test_consecutive_leases_take_disjoint_rows(engine: Engine, clock: FakeClock) -> None:
    for key in ("a", "b", "c"):
        new_job(engine, key)
    first, second, third = lease(engine, clock, limit=2), lease(engine, clock, limit=2), lease(engine, clock)
    assert len(first.rows) == 2 and len(second.rows) == 1 and third.rows == ()
    assert not set(ids(first)) & set(ids(second))
    assert len({first.token, second.token, third.token}) == 3


def test_a_lease_skips_rows_not_yet_due(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine)
    add_row(engine, clock, job_id, due_in=10)
    assert len(lease(engine, clock).rows) == 1
    clock.advance(10)
    assert [job for _, job in lease(engine, clock).rows] == [job_id]


def test_the_holder_marks_its_rows_published_once(engine: Engine, clock: FakeClock) -> None:
    new_job(engine)
    held = lease(engine, clock)
    clock.advance(1)
    assert mark(engine, clock, held) == 1
    [row] = rows(engine)
    assert (row["published_at"], row["lease_token"], row["lease_expires_at"]) == (clock.now(), None, None)
    assert mark(engine, clock, held) == 0
    assert lease(engine, clock).rows == ()


def test_a_stale_relay_token_cannot_mark_rows_another_lease_took_over(
    engine: Engine, clock: FakeClock
) -> None:
    new_job(engine, "a")
    new_job(engine, "b")
    stalled = lease(engine, clock)
    clock.advance(RELAY_LEASE)
    taken_over = lease(engine, clock)
    assert ids(taken_over) == ids(stalled)
    before = rows(engine)
    assert mark(engine, clock, stalled) == 0
    assert rows(engine) == before
    assert mark(engine, clock, taken_over) == 2
    assert published(engine) == ids(stalled)


def test_a_token_marks_only_rows_of_its_own_lease(engine: Engine, clock: FakeClock) -> None:
    new_job(engine, "a")
    mine = lease(engine, clock)
    new_job(engine, "b")
    theirs = lease(engine, clock)
    assert mark(engine, clock, mine, ids(mine) + ids(theirs)) == 1
    assert published(engine) == ids(mine)


def test_marking_nothing_writes_nothing(engine: Engine, clock: FakeClock) -> None:
    new_job(engine)
    held = lease(engine, clock)
    before = rows(engine)
    assert mark(engine, clock, held, []) == 0
    assert db.transact(engine, outbox.release, held.token, [], retry_at=clock.now()) == 0
    assert rows(engine) == before


def test_released_rows_come_back_at_the_retry_time(engine: Engine, clock: FakeClock) -> None:
    new_job(engine)
    held = lease(engine, clock)
    assert db.transact(engine, outbox.release, held.token, ids(held), retry_at=clock.now() + 5) == 1
    [row] = rows(engine)
    assert (row["lease_token"], row["lease_expires_at"], row["available_at"]) == (None, None, clock.now() + 5)
    assert lease(engine, clock).rows == ()
    clock.advance(5)
    again = lease(engine, clock)
    assert ids(again) == ids(held)
    assert rows(engine)[0]["publish_attempts"] == 2


def test_a_stale_token_cannot_release_rows_another_lease_took_over(engine: Engine, clock: FakeClock) -> None:
    new_job(engine)
    stalled = lease(engine, clock)
    clock.advance(RELAY_LEASE)
    taken_over = lease(engine, clock)
    before = rows(engine)
    assert db.transact(engine, outbox.release, stalled.token, ids(stalled), retry_at=clock.now() + 99) == 0
    assert rows(engine) == before
    assert mark(engine, clock, taken_over) == 1


def test_prune_deletes_only_rows_published_before_the_cutoff(engine: Engine, clock: FakeClock) -> None:
    new_job(engine, "old")
    old = lease(engine, clock)
    mark(engine, clock, old)
    clock.advance(100)
    new_job(engine, "recent")
    recent = lease(engine, clock)
    mark(engine, clock, recent)
    new_job(engine, "pending")
    assert db.transact(engine, outbox.prune_published, older_than=clock.now()) == 1
    remaining = rows(engine)
    assert [r["id"] for r in remaining] == [*ids(recent), remaining[-1]["id"]]
    assert remaining[-1]["published_at"] is None


def test_prune_deletes_at_most_its_limit(engine: Engine, clock: FakeClock) -> None:
    for key in ("a", "b", "c"):
        new_job(engine, key)
    mark(engine, clock, lease(engine, clock))
    clock.advance(1)
    assert db.transact(engine, outbox.prune_published, older_than=clock.now(), limit=2) == 2
    assert db.transact(engine, outbox.prune_published, older_than=clock.now(), limit=2) == 1
    assert rows(engine) == []


def test_the_backlog_counts_due_unpublished_rows_and_the_oldest_wait(
    engine: Engine, clock: FakeClock
) -> None:
    assert db.read(engine, outbox.backlog, clock.now()) == outbox.Backlog(pending=0, oldest_age_seconds=0.0)
    done = new_job(engine, "done")
    mark(engine, clock, lease(engine, clock))
    clock.advance(2)
    new_job(engine, "waiting")
    add_row(engine, clock, done, due_in=60)
    clock.advance(3)
    new_job(engine, "leased")
    lease(engine, clock, limit=1)
    assert db.read(engine, outbox.backlog, clock.now()) == outbox.Backlog(pending=2, oldest_age_seconds=3.0)


def test_a_lease_carries_each_leased_jobs_stored_trace_context(engine: Engine, clock: FakeClock) -> None:
    traced = {new_job(engine, key, traceparent=f"00-{key * 32}-{key * 16}-01"): key for key in ("a", "b")}
    untraced = new_job(engine, "c")
    held = lease(engine, clock)
    assert {job for _, job in held.rows} == {*traced, untraced}
    assert held.traceparents == {job: f"00-{key * 32}-{key * 16}-01" for job, key in traced.items()}
