"""The hot statements that pick rows by id use the index they name on SQLite, whose planner has no statistics
on a store (nothing runs ANALYZE): without the names, a claim by id walked every queued job, the relay's mark
every unpublished row and its read sorted every due row (`jobstore.drivers.sqlite`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from outbox_bridge.jobstore import db, migrate
from outbox_bridge.jobstore.drivers import sqlite as driver
from tests.conftest import sqlite_settings


def plan(engine: Engine, sql: str) -> list[str]:
    params: dict[str, Any] = dict.fromkeys(re.findall(r":(\w+)", sql))
    with engine.connect() as conn:
        driver: Any = conn.connection.driver_connection
        return [str(row[-1]) for row in driver.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()]


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Engine]:
    """A new SQLite store of the test's own, whatever store the suite runs on (PostgreSQL plans from
    statistics of its own)."""
    settings = sqlite_settings(tmp_path)
    engine = db.make_engine(settings)
    migrate.init_schema(settings, engine)
    yield engine
    engine.dispose()


# The driver's named statements that pick rows by a JSON array of ids, and the first step of each plan.
NAMED_PLANS = {
    "claim_by_ids": "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)",
    "claim_drop_pending": "SEARCH outbox USING INDEX ix_outbox_job_id (job_id=?)",
    "complete_many": "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)",
    "lock_ranked_jobs": "SEARCH jobs USING COVERING INDEX sqlite_autoindex_jobs_1 (id=?)",
    "queued_tenants_of": "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)",
    "lose_running_attempts": "SEARCH attempts USING INDEX sqlite_autoindex_attempts_2 (job_id=?)",
    "jobs_present": "SEARCH jobs USING COVERING INDEX sqlite_autoindex_jobs_1 (id=?)",
    "outbox_rows_chosen": "SEARCH outbox USING INTEGER PRIMARY KEY (rowid=?)",
    "outbox_mark_published": "SEARCH outbox USING INTEGER PRIMARY KEY (rowid=?)",
    "outbox_event_facts": "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)",
    "outbox_hold_back": "SEARCH outbox USING INTEGER PRIMARY KEY (rowid=?)",
}


@pytest.mark.parametrize("name", NAMED_PLANS)
def test_a_named_statement_by_ids_looks_each_id_up(sqlite: Engine, name: str) -> None:
    steps = plan(sqlite, driver.DRIVER.statement(name).sql)
    assert steps[0] == NAMED_PLANS[name], steps


def test_the_relay_walks_due_rows_in_order_on_their_index_without_sorting(sqlite: Engine) -> None:
    assert plan(sqlite, driver.DRIVER.statement("outbox_due_in_order").sql) == [
        "SCAN outbox USING INDEX ix_outbox_due_priority_id"
    ]


def test_the_relays_tenant_check_seeks_the_due_tenants_index(sqlite: Engine) -> None:
    steps = plan(sqlite, driver.DRIVER.statement("outbox_tenant_range").sql)
    assert steps.count("SEARCH outbox USING INDEX ix_outbox_due_tenant") == 2, steps
