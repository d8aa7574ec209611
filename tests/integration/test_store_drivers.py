"""The drivers' conformance: each operation of `jobstore.drivers.Driver`, called on the driver of the test's
store, does what the interface promises, with the same rows written and returned on SQLite and PostgreSQL.
(Every other store test runs on both drivers too, through the operations that call them.)"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, Engine, select

from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import db, drivers, fenced, intake, leader
from outbox_bridge.jobstore.schema import attempts, jobs, outbox
from outbox_bridge.jobstore.statistics import TABLES
from tests.support.store import claimed, new_job, new_jobs


def rows_of(prepared: list[intake.Prepared]) -> list[dict[str, Any]]:
    return [p.row for p in prepared]


def prepared(
    now: float, *keys: str, tenant: str = "acme", traceparent: str | None = None
) -> list[intake.Prepared]:
    return [
        intake.prepare(
            tenant=tenant, owner="alice", kind="noop", payload={"key": key}, operation_key=key, now=now,
            max_attempts=3, traceparent=traceparent,
        )
        for key in keys
    ]  # fmt: skip


def test_the_driver_is_the_one_of_the_stores_database(engine: Engine) -> None:
    driver = drivers.of(engine)
    assert driver.name == engine.dialect.name
    assert drivers.for_url(engine.url) is driver
    with engine.connect() as conn:
        assert drivers.of(conn) is driver


def test_a_database_without_a_driver_is_named_in_the_error() -> None:
    with pytest.raises(drivers.UnknownDatabase, match=r"'mysql'.*sqlite, postgresql"):
        drivers.for_url("mysql://localhost/jobs")


def test_a_new_store_is_fit_for_its_driver(engine: Engine) -> None:
    with engine.connect() as conn:
        assert drivers.of(engine).check(conn) is None


def test_jobs_are_inserted_with_an_outbox_row_each_and_a_taken_key_is_skipped(
    engine: Engine, clock: FakeClock
) -> None:
    driver = drivers.of(engine)
    first = prepared(clock.now(), "a", "b")
    assert db.transact(engine, driver.insert_jobs, rows_of(first)) == {p.row["id"] for p in first}
    again = prepared(clock.now(), "b", "c")  # "b" is taken: its row is skipped
    assert db.transact(engine, driver.insert_jobs, rows_of(again)) == {again[1].row["id"]}

    def read(conn: Connection) -> tuple[list[Any], list[Any]]:
        stored = conn.execute(select(jobs.c.operation_key).order_by(jobs.c.operation_key)).scalars().all()
        announced = conn.execute(
            select(outbox.c.job_id, outbox.c.tenant, outbox.c.priority, outbox.c.published_at)
        ).all()
        return list(stored), [tuple(row) for row in announced]

    stored, announced = db.read(engine, read)
    assert stored == ["a", "b", "c"]
    assert sorted(announced) == sorted(
        (p.row["id"], "acme", p.row["priority"], None) for p in [*first, again[1]]
    )
    assert db.transact(engine, driver.insert_jobs, []) == set()


def test_a_claim_takes_the_jobs_and_writes_their_first_attempts(engine: Engine, clock: FakeClock) -> None:
    job_ids = new_jobs(engine, 3)
    attempt_ids = {job_id: intake.new_attempt_id() for job_id in [*job_ids, "no-such-job"]}
    params = {
        "now": clock.now(),
        "worker": "w1",
        "lease_until": clock.now() + 30,
        "running_since": clock.now(),
    }

    def claim(conn: Connection) -> tuple[list[tuple[Any, ...]], set[str]]:
        return drivers.of(conn).claim(conn, params, attempt_ids, limited=None, drop_pending=True)

    rows, written = db.transact(engine, claim)
    assert sorted(str(row[0]) for row in rows) == sorted(job_ids)
    assert all(row[1] == 1 for row in rows), "epoch 1"
    assert written == set(job_ids)

    def read(conn: Connection) -> tuple[set[tuple[Any, ...]], int]:
        started = {
            tuple(r) for r in conn.execute(select(attempts.c.id, attempts.c.job_id, attempts.c.outcome))
        }
        pending = len(conn.execute(select(outbox.c.id).where(outbox.c.published_at.is_(None))).all())
        return started, pending

    started, pending = db.read(engine, read)
    assert started == {(attempt_ids[job_id], job_id, "running") for job_id in job_ids}
    assert pending == 0, "the claimed jobs' pending outbox rows are dropped"
    assert db.transact(engine, claim) == ([], set()), "taken already"


def test_completions_commit_under_their_own_fences(engine: Engine, clock: FakeClock) -> None:
    done, stale = new_job(engine, "done"), new_job(engine, "stale")
    first, second = claimed(engine, done), claimed(engine, stale)
    completions = [
        fenced.Completion(done, first.epoch, first.attempt_id, {"ok": 1}),
        fenced.Completion(stale, second.epoch + 1, second.attempt_id, {"ok": 2}),  # not its epoch
    ]
    rows = db.transact(engine, lambda conn: drivers.of(conn).complete_many(conn, completions, clock.now()))
    assert [(row[0], row[1]) for row in rows] == [("succeeded", done)]

    def read(conn: Connection) -> list[tuple[Any, ...]]:
        query = select(attempts.c.job_id, attempts.c.outcome, attempts.c.output).order_by(attempts.c.job_id)
        return [tuple(row) for row in conn.execute(query)]

    ended = dict((job_id, (outcome, output)) for job_id, outcome, output in db.read(engine, read))
    assert ended[done][0] == "succeeded" and ended[done][1] is not None
    assert ended[stale] == ("running", None)


def test_published_rows_are_marked_with_their_events_facts_while_the_token_holds(
    engine: Engine, clock: FakeClock
) -> None:
    db.transact(engine, intake.accept_prepared, prepared(clock.now(), "a", traceparent=TRACEPARENT))
    row_ids = db.read(engine, lambda conn: list(conn.execute(select(outbox.c.id)).scalars()))
    assert db.transact(engine, leader.take, "role", now=clock.now(), seconds=60)

    def mark(token: str) -> list[Any]:
        params = {"name": leader.NAME, "token": token, "now": clock.now()}
        return db.transact(engine, lambda conn: drivers.of(conn).mark_published(conn, params, row_ids))

    assert mark("another") == []
    [(job_id, tenant, kind, traceparent)] = [tuple(row) for row in mark("role")]
    assert (tenant, kind, traceparent) == ("acme", "noop", TRACEPARENT)
    assert job_id == db.read(engine, lambda conn: conn.execute(select(jobs.c.id)).scalar_one())
    assert mark("role") == [], "marked once"


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_relays_read_finds_what_the_read_in_steps_finds(engine: Engine, clock: FakeClock) -> None:
    """`leader.read` reads at once where the driver can (`reads_due_in_one_statement`), in steps
    elsewhere."""
    new_jobs(engine, 3)
    found, _ = leader.read(engine, "role", now=clock.now(), limit=10)
    in_steps, _ = db.read(engine, leader.due, "role", now=clock.now(), limit=10)
    assert found is not None and found.rows == in_steps.rows and len(found.rows) == 3
    if drivers.of(engine).reads_due_in_one_statement():
        at_once = db.read_one(engine, leader.due_at_once, "role", now=clock.now(), limit=10)
        assert at_once is not None and at_once[0].rows == in_steps.rows


def test_rows_are_read_locking_and_keys_are_locked_in_a_transaction(engine: Engine, clock: FakeClock) -> None:
    job_id = new_job(engine)

    def lock(conn: Connection) -> list[str]:
        driver = drivers.of(conn)
        driver.lock_keys(conn, [(1, 2), (1, 3)])
        rows = db.execute(conn, "lock_ranked_jobs", {"ids": driver.array([job_id, "no-such-job"])})
        return [str(row[0]) for row in rows]

    assert db.transact(engine, lock) == [job_id]


def test_stale_statistics_and_worn_tables_name_only_store_tables(engine: Engine) -> None:
    new_jobs(engine, 3)
    driver = drivers.of(engine)
    params = {
        "tables": list(TABLES), "min_changed": 0, "fraction": 0.0, "stale_after": 0,
        "min_dead": 0, "worn_after": 0,
    }  # fmt: skip
    stale, worn, refused = driver.upkeep_due(engine, params)
    assert set(stale) <= set(TABLES) and set(worn) <= set(TABLES)
    assert refused == []  # the tests' store user owns the tables
    for table in worn:
        driver.vacuum(engine, table)
    for table in stale:
        with engine.begin() as conn:
            driver.analyze(conn, table, lock_timeout="200ms")
