"""PostgreSQL: the relay role's read of due rows behind a backlog reads what it returns, not the backlog.

It walks the unpublished rows' partial index in (priority, id) order, leaves out the rows the relay has
published and not yet written back (up to its window, 1,000 by default) through a hashed set, and finds the
waiting tenants and the next row to come due by index seeks. Before, with `id <> ALL(...)` and indexes led
by `published_at`, each read sorted the whole backlog and compared every row with every row left out: 20 ms
a read in a 5,000-job burst here, 120-220 ms once the prepared statement's generic plan took over. Both plans
PostgreSQL may choose for the prepared statement are checked."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import Engine, text

from outbox_bridge.jobstore import db, leader
from outbox_bridge.jobstore.drivers import postgresql as postgresql_driver
from tests.support.store import new_jobs

pytestmark = pytest.mark.databases("postgresql")

BACKLOG = 3000
SENT = 900  # published, not yet written back: the read leaves them out
LIMIT = 80


@pytest.fixture
def backlog(engine: Engine) -> list[int]:
    """BACKLOG due outbox rows, counted by ANALYZE; their ids in the order the relay reads them."""
    for _ in range(BACKLOG // 500):
        new_jobs(engine, 500, now=time.time() - 60)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE outbox"))
        conn.execute(text("ANALYZE jobs"))
        ids = list(conn.execute(text("SELECT id FROM outbox ORDER BY priority, id")).scalars())
    return ids


def plan(engine: Engine, mode: str, exclude: list[int]) -> str:
    """EXPLAIN of the read as the relay prepares it, under `plan_cache_mode = mode`."""
    sql = postgresql_driver.DRIVER.statement("outbox_read_due").sql
    for number, name in enumerate(("now", "limit", "walk", "exclude"), start=1):
        sql = sql.replace(f"%({name})s", f"${number}")
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        driver.execute("PREPARE due_read(float8, int, int, bigint[]) AS " + sql)
        driver.execute(f"SET plan_cache_mode = {mode}")
        try:
            explained = psycopg.ClientCursor(driver).execute(
                "EXPLAIN EXECUTE due_read(%s, %s, %s, %s)", (time.time(), LIMIT, LIMIT + 1, exclude)
            )
            return "\n".join(str(row[0]) for row in explained.fetchall())
        finally:
            driver.execute("DEALLOCATE due_read")
            driver.execute("RESET plan_cache_mode")
            conn.rollback()


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
def test_the_read_walks_the_due_index_and_leaves_out_the_sent_rows_through_a_hash(
    engine: Engine, backlog: list[int], mode: str
) -> None:
    explained = plan(engine, mode, backlog[:SENT])

    assert "Seq Scan on outbox" not in explained, explained
    assert "ix_outbox_due_priority_id" in explained, explained
    assert "hashed SubPlan" in explained, explained
    assert "ix_outbox_due_tenant" in explained and "ix_outbox_due_available_at" in explained, explained


def test_the_read_returns_the_rows_after_the_sent_ones_in_order(engine: Engine, backlog: list[int]) -> None:
    found = db.read_one(
        engine, leader.due_at_once, "token", now=time.time(), limit=LIMIT, exclude=backlog[:SENT]
    )

    assert found is not None
    lease, next_due = found
    assert [row_id for row_id, _ in lease.rows] == backlog[SENT : SENT + LIMIT]
    assert next_due is None
