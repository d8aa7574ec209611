"""The statements a job's path runs read the jobs, outbox and attempts tables by index, never by a scan of
the whole table: a scan costs time in proportion to the store's size (days of finished jobs, with retention)
and holds SQLite's single write slot meanwhile. Every statement the hot path sends is captured from the
engine (`db.statements_seen`) and its plan read with `EXPLAIN QUERY PLAN`.

A correlated subquery in an UPDATE's RETURNING clause, for example, reads as an index lookup but is planned
as a scan of the subquery's table for every row returned (SQLite 3.40); this is what these tests catch."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import pytest
from sqlalchemy import Engine

from outbox_bridge.core.backoff import Backoff
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.jobstore import claiming, db, fenced
from tests.support import operations as recording
from tests.support.store import claimed, new_jobs, publish_due

pytestmark = pytest.mark.databases("sqlite")

BIG_TABLES = ("jobs", "outbox", "attempts")
ONE_STATE_WALKS = tuple(
    f"SCAN {table} USING {how}INDEX {prefix}"
    for table, prefix in (
        ("outbox", "ix_outbox_due_"),
        ("jobs", "ix_jobs_queued_"),
        ("jobs", "ix_jobs_running_"),
    )
    for how in ("", "COVERING ")
)


def scans(engine: Engine, executed: Sequence[db.Sent]) -> list[tuple[str, str]]:
    """(statement, plan line) for each full scan of a big table among `executed` (a statement sent with
    several parameter sets is planned with the first)."""
    path = engine.url.database
    assert path
    raw = sqlite3.connect(path)
    found = []
    try:
        for statement, parameters, many in executed:
            values = parameters[0] if many else parameters
            if not statement.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT", "DELETE", "WITH")):
                continue
            for row in raw.execute("EXPLAIN QUERY PLAN " + statement, values or ()):
                detail = str(row[3])
                # A walk of a partial index of the unpublished rows, or of the queued or the running jobs,
                # reads the backlog or the jobs in hand only, never the finished ones: the relay's walk of
                # the due rows in order, the baseline's of the queued jobs, a count of the running ones.
                if detail.startswith(ONE_STATE_WALKS):
                    continue
                if any(detail.startswith(f"SCAN {table}") for table in BIG_TABLES):
                    found.append((statement, detail))
    finally:
        raw.close()
    return found


def test_a_relay_reads_and_marks_rows_without_scanning_the_store(engine: Engine, clock: FakeClock) -> None:
    new_jobs(engine, 300)
    new_jobs(engine, 300, tenant="other")
    with db.statements_seen(engine) as executed:
        for limit in (1, 50, 1000):  # one row; a backlog ranked across tenants; everything due
            assert publish_due(engine, limit=limit)
    assert scans(engine, executed) == []


def test_workers_claim_and_commit_without_scanning_the_store(engine: Engine, clock: FakeClock) -> None:
    job_ids = new_jobs(engine, 600)
    with db.statements_seen(engine) as executed:
        held = db.transact(engine, claiming.claim_many, job_ids[:20], "w1", clock.now(), 30)
        claims = [result.claim for result in held if result.claim is not None]
        done = [fenced.Completion(c.job_id, c.epoch, c.attempt_id, {}) for c in claims]
        assert db.transact(engine, fenced.complete_many, done, clock.now())
        due = db.transact(engine, claiming.claim_due, "w2", clock.now(), 30, 20)
        assert due
        one = claimed(engine, job_ids[-1], "w3")
        db.transact(engine, fenced.renew_lease, one.job_id, one.epoch, clock.now(), 30)
        db.transact(
            engine,
            lambda conn: fenced.fail(
                conn, one.job_id, one.epoch, one.attempt_id, code="boom", message="boom", permanent=False,
                now=clock.now(), backoff=Backoff(base=1, cap=2),
            ),
        )  # fmt: skip
    assert scans(engine, executed) == []


def test_no_store_operation_reads_every_job_outbox_row_or_attempt(engine: Engine) -> None:
    """Each of the store's operations (`jobstore.drivers.recording`: the accept, both claims, a round's
    completions, the relay's read and mark, the sweeps, the retention, the operator's moves), as it runs:
    a sweep or a prune that walked the primary key in id order instead of its state's index read the whole
    table under SQLite's write slot, every sweep interval."""
    operations = recording.record(engine)
    found = [
        (operation.name, detail) for operation in operations for _, detail in scans(engine, operation.sent)
    ]
    assert found == []
