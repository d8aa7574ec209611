"""The outbox: the relay role's holder reads the due rows, oldest first up to its limit (`leader.due`),
marks the ones it published; published rows are pruned; the backlog counts what is due."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, leader, outbox
from outbox_bridge.jobstore.schema import outbox as outbox_table
from tests.support.store import due_rows, new_job, publish, publish_due


def add_row(engine: Engine, clock: FakeClock, job_id: str, *, due_in: float = 0.0) -> None:
    db.transact(
        engine, lambda conn: outbox.add(conn, job_id, available_at=clock.now() + due_in, now=clock.now())
    )


def rows(engine: Engine) -> list[dict[str, Any]]:
    query = select(outbox_table).order_by(outbox_table.c.id)
    return db.read(engine, lambda conn: [dict(r) for r in conn.execute(query).mappings()])


def published(engine: Engine) -> list[int]:
    return [r["id"] for r in rows(engine) if r["published_at"] is not None]


def test_a_read_takes_due_rows_oldest_first_up_to_its_limit(engine: Engine, clock: FakeClock) -> None:
    job_ids = []
    for key in ("a", "b", "c"):
        job_ids.append(new_job(engine, key))
        clock.advance(1)
    assert [job for _, job in due_rows(engine, limit=2).rows] == job_ids[:2]
    assert [r["publish_attempts"] for r in rows(engine)] == [0, 0, 0], "a read writes nothing"


def test_a_read_skips_rows_not_yet_due(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine)
    add_row(engine, clock, job_id, due_in=10)
    assert len(due_rows(engine).rows) == 1
    clock.advance(10)
    assert [job for _, job in due_rows(engine).rows] == [job_id, job_id]


def test_a_published_row_is_marked_once_and_is_due_no_more(engine: Engine, clock: FakeClock) -> None:
    new_job(engine)
    [row_id] = publish_due(engine)
    [row] = rows(engine)
    assert (row["published_at"], row["publish_attempts"]) == (clock.now(), 1)
    assert publish(engine, [row_id]) == 0
    assert due_rows(engine).rows == ()


def test_prune_deletes_only_rows_published_before_the_cutoff(engine: Engine, clock: FakeClock) -> None:
    new_job(engine, "old")
    publish_due(engine)
    clock.advance(100)
    new_job(engine, "recent")
    recent = publish_due(engine)
    new_job(engine, "pending")
    assert db.transact(engine, outbox.prune_published, older_than=clock.now()) == 1
    remaining = rows(engine)
    assert [r["id"] for r in remaining] == [*recent, remaining[-1]["id"]]
    assert remaining[-1]["published_at"] is None


def test_prune_deletes_at_most_its_limit(engine: Engine, clock: FakeClock) -> None:
    for key in ("a", "b", "c"):
        new_job(engine, key)
    publish_due(engine)
    clock.advance(1)
    assert db.transact(engine, outbox.prune_published, older_than=clock.now(), limit=2) == 2
    assert db.transact(engine, outbox.prune_published, older_than=clock.now(), limit=2) == 1
    assert rows(engine) == []


def test_the_backlog_counts_due_unpublished_rows_and_the_oldest_wait(
    engine: Engine, clock: FakeClock
) -> None:
    assert db.read(engine, outbox.backlog, clock.now()) == outbox.Backlog(pending=0, oldest_age_seconds=0.0)
    done = new_job(engine, "done")
    publish_due(engine)
    clock.advance(2)
    new_job(engine, "waiting")
    add_row(engine, clock, done, due_in=60)
    clock.advance(3)
    new_job(engine, "also waiting")
    assert db.read(engine, outbox.backlog, clock.now()) == outbox.Backlog(pending=2, oldest_age_seconds=3.0)


def test_a_read_carries_each_jobs_stored_trace_context(engine: Engine, clock: FakeClock) -> None:
    traced = {new_job(engine, key, traceparent=f"00-{key * 32}-{key * 16}-01"): key for key in ("a", "b")}
    untraced = new_job(engine, "c")
    found = due_rows(engine)
    assert {job for _, job in found.rows} == {*traced, untraced}
    assert found.traceparents == {job: f"00-{key * 32}-{key * 16}-01" for job, key in traced.items()}


def test_both_reads_carry_each_jobs_kind_for_its_publish_span(engine: Engine, clock: FakeClock) -> None:
    kinds = {new_job(engine, "a"): "noop", new_job(engine, "b", kind="flaky", payload={}): "flaky"}
    in_steps = due_rows(engine)
    at_once = db.read_one(engine, leader.due_at_once, "token", now=clock.now(), limit=100)
    assert at_once is not None
    assert in_steps.kinds == at_once[0].kinds == kinds
