"""PostgreSQL plans the claim with the row counts of its last ANALYZE: after a burst into a table it last
counted with no queued job, the due walk may read and sort every queued job (whether it does turns on
costs a few units apart; `docs/scaling.md` has a case that did). The sweepers refresh the statistics of a
table that changed that much (`jobstore.statistics`), at most every `MIN_INTERVAL_SECONDS`, after which the
walk is an ordered index walk. And the relay's read of the unpublished outbox rows steps over the dead index
entry of every row published since the table's last VACUUM: the sweepers vacuum a table once enough of its
row versions are dead, after which the read touches a few pages again."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from outbox_bridge.core import clock
from outbox_bridge.jobstore import claiming, db, statistics
from outbox_bridge.jobstore.drivers.postgresql import DRIVER
from tests.support.procs import wait_for
from tests.support.store import new_jobs

pytestmark = pytest.mark.databases("postgresql")

BACKLOG = 3000


def walk_plan(engine: Engine) -> str:
    """The plan of the claim's walk of queued jobs, as `claiming._due_ids` runs it now."""

    def walk(conn: Connection) -> str:
        with db.statements_seen(engine) as sent:
            claiming._due_ids(conn, clock.now(), 10)
        [(statement, parameters)] = [(s.sql, s.parameters) for s in sent if "ORDER BY jobs.priority" in s.sql]
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute("EXPLAIN " + statement, parameters)
        return "\n".join(str(row[0]) for row in cursor.fetchall())

    with engine.connect() as conn, conn.begin() as transaction:
        plan = walk(conn)
        transaction.rollback()
    return plan


def test_a_burst_into_a_table_counted_nearly_empty_is_analyzed_and_walked_in_order(engine: Engine) -> None:
    finished = new_jobs(engine, 1000)
    with engine.begin() as conn:
        for table in statistics.TABLES:
            conn.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)"))
        # What a store looks like between bursts: its jobs finished, none queued, and counted so.
        conn.execute(text("UPDATE jobs SET state = 'succeeded' WHERE id = ANY(:ids)"), {"ids": finished})
        conn.execute(text("ANALYZE jobs"))
        conn.execute(text("ANALYZE outbox"))
    for _ in range(BACKLOG // 500):
        new_jobs(engine, 500)

    # The counters reach pg_stat_user_tables once the inserting connections flush them (within a second).
    # The tables were analyzed just now: stale once `min_interval` allows (its default, ten seconds, is
    # checked below).
    wait_for(lambda: statistics.stale(engine, 0) == ["jobs", "outbox"], timeout=10, what="stale statistics")
    assert statistics.stale(engine) == []
    assert statistics.refresh(engine, 0) == ["jobs", "outbox"]

    plan = walk_plan(engine)
    assert "Sort" not in plan and "ix_jobs_queued_priority_available_at" in plan, plan
    # Just analyzed: no refresh again within the interval. (Not `stale(engine, 0)`: an inserting connection
    # may flush the last of its counters after the ANALYZE, under load, and count the table changed again.)
    assert statistics.stale(engine) == [] and statistics.refresh(engine) == []
    claims = db.transact(engine, claiming.claim_due, "w", clock.now(), 60.0, 10)
    assert len(claims) == 10


def read_pages(engine: Engine) -> int:
    """The pages the relay's read of due rows touched (`EXPLAIN (ANALYZE, BUFFERS)` of its statement)."""
    read = DRIVER.statement("outbox_read_due").sql
    params = {"now": clock.now(), "limit": 500, "walk": 501, "exclude": []}
    with engine.connect() as conn:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + read, params)
        [[[plan]]] = cursor.fetchall()
    return int(plan["Plan"]["Shared Hit Blocks"]) + int(plan["Plan"]["Shared Read Blocks"])


PUBLISHED = 6000


def test_outbox_rows_published_by_thousands_are_vacuumed_and_the_read_touches_few_pages(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE outbox SET (autovacuum_enabled = false)"))
    clean = read_pages(engine)  # nothing to read
    for _ in range(PUBLISHED // 1000):
        new_jobs(engine, 1000)
    with engine.begin() as conn:  # what the relay's marks leave: a dead version of every row
        conn.execute(text("UPDATE outbox SET published_at = 1"))
    worn = read_pages(engine)  # nothing to read either
    assert worn >= clean + 10, (clean, worn)  # a page of the index holds a few hundred entries

    # The counters reach pg_stat_user_tables once the updating connection flushes them (within a second).
    wait_for(
        lambda: statistics.worn(engine, 0, PUBLISHED) == ["outbox"], timeout=10, what="dead rows counted"
    )
    assert statistics.worn(engine, 0, PUBLISHED + 1) == []
    assert statistics.vacuum(engine, 0, PUBLISHED) == ["outbox"]
    after = read_pages(engine)
    assert after <= clean + 2, (clean, worn)
    # Just vacuumed: not again within the interval, nor with fewer dead rows than asked.
    assert statistics.worn(engine) == [] and statistics.worn(engine, 0) == []


ENDED = 3000


def test_the_attempts_of_ended_jobs_are_vacuumed_with_the_jobs_and_the_outbox(engine: Engine) -> None:
    """Each attempt is written as it starts and again as it ends: one dead row version a job, which the
    sweepers' upkeep (`statistics.tend`, whose `vacuum` this is) removes as it does the jobs' and the
    outbox's."""
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE attempts SET (autovacuum_enabled = false)"))
    for _ in range(ENDED // 1000):
        ids = new_jobs(engine, 1000)
        with engine.begin() as conn:  # what the claims and the ends leave: an ended attempt of each job
            conn.execute(
                text(
                    "INSERT INTO attempts (id, job_id, epoch, worker, started_at, outcome)"
                    " SELECT md5(id), id, 1, 'w', 1, 'running' FROM unnest(CAST(:ids AS text[])) AS id"
                ),
                {"ids": ids},
            )
            conn.execute(text("UPDATE attempts SET ended_at = 2, outcome = 'succeeded'"))

    wait_for(lambda: statistics.worn(engine, 0, ENDED) == ["attempts"], timeout=10, what="dead attempts")
    assert statistics.vacuum(engine, 0, ENDED) == ["attempts"]
    assert statistics.worn(engine, 0, ENDED) == []
    with engine.connect() as conn:
        vacuumed = conn.execute(
            text("SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables WHERE relid = 'attempts'::regclass")
        ).scalar_one()
    assert vacuumed


def test_a_store_user_that_does_not_own_the_tables_asks_for_no_upkeep_and_is_told_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL skips another user's VACUUM or ANALYZE with a warning in its log: the sweeper of a store
    user that may not keep the tables up does not ask for either at every sweep, and says so once."""
    schema = str(engine.url.query["options"]).removeprefix("-csearch_path=")
    role = f"r_{uuid.uuid4().hex[:12]}"
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE outbox SET (autovacuum_enabled = false)"))
        conn.execute(text(f"CREATE ROLE {role} LOGIN"))
        conn.execute(text(f"GRANT USAGE ON SCHEMA {schema} TO {role}"))
        conn.execute(text(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"))
    theirs = create_engine(engine.url.set(username=role))
    try:
        new_jobs(engine, 1000)
        with engine.begin() as conn:
            conn.execute(text("UPDATE outbox SET published_at = 1"))
        wait_for(lambda: statistics.worn(engine, 0, 1000) == ["outbox"], timeout=10, what="dead rows counted")

        found = statistics.due(theirs, stale_after=0, worn_after=0, min_dead=1000)
        assert found == statistics.Due(stale=[], worn=[], refused=["attempts", "jobs", "outbox"])
        with caplog.at_level(logging.WARNING, logger=statistics.__name__):
            statistics.tend(theirs)
            statistics.tend(theirs)
        [told] = [r.getMessage() for r in caplog.records if r.name == statistics.__name__]
        assert "may not VACUUM or ANALYZE attempts, jobs, outbox" in told
        assert statistics.worn(engine, 0, 1000) == ["outbox"]  # nothing vacuumed it
        assert statistics.due(engine, stale_after=0, worn_after=0, min_dead=1000).refused == []
    finally:
        theirs.dispose()
        with engine.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))


def test_sqlite_has_no_statistics_to_refresh(tmp_path: Any) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    assert statistics.stale(engine) == [] and statistics.refresh(engine) == []
    assert statistics.worn(engine, 0, 0) == [] and statistics.vacuum(engine, 0, 0) == []
