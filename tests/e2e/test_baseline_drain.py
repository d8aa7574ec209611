"""Several baseline worker processes drain a backlog from one SQLite file: every job runs exactly once and
lock contention never escapes as an error."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, func, select

from outbox_bridge.core import clock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, queries
from outbox_bridge.jobstore.schema import attempts, jobs
from tests.conftest import make_settings
from tests.support.procs import Proc, start, wait_for
from tests.support.store import add_job

pytestmark = pytest.mark.slow

JOBS = 2000
WORKERS = 4
CONCURRENCY = 2
ACCEPT_BATCH = 250
DRAIN_BOUND_SECONDS = 120.0


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The baseline is the SQLite-only design: it always runs on a SQLite file of its own."""
    return make_settings(tmp_path)


def _accept_noops(conn: Connection, first: int, count: int) -> None:
    now = clock.now()
    for n in range(first, first + count):
        add_job(conn, f"noop-{n}", payload={"n": n}, now=now)


def accept_backlog(engine: Engine, count: int) -> None:
    for first in range(0, count, ACCEPT_BATCH):
        db.transact(engine, _accept_noops, first, min(ACCEPT_BATCH, count - first))


def started_executions(log: Path) -> Counter[str]:
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Counter(line["job_id"] for line in lines if line["event"] == "start")


def succeeded(engine: Engine) -> int:
    return db.read(engine, queries.counts_by_state)["succeeded"]


def _job_ids(conn: Connection) -> set[str]:
    return set(conn.execute(select(jobs.c.id)).scalars())


def _drain_span(conn: Connection) -> tuple[float, float]:
    first, last = conn.execute(select(func.min(jobs.c.started_at), func.max(jobs.c.finished_at))).one()
    return float(first), float(last)


def _claims_by_pid(conn: Connection) -> Counter[str]:
    workers = conn.execute(select(attempts.c.worker)).scalars()
    return Counter(worker.split(":")[-1].split("/")[0] for worker in workers)


@pytest.mark.timeout(240)
def test_four_workers_drain_two_thousand_jobs_each_exactly_once(
    settings: Settings, engine: Engine, tmp_path: Path
) -> None:
    accept_backlog(engine, JOBS)
    procs: list[Proc] = []
    try:
        began = time.monotonic()
        for n in range(WORKERS):
            procs.append(
                start(
                    ["worker", "--concurrency", str(CONCURRENCY)], settings, tmp_path / "logs", f"worker-{n}"
                )
            )
        wait_for(lambda: succeeded(engine) == JOBS, DRAIN_BOUND_SECONDS, 0.2, f"{JOBS} jobs to succeed")
        with_startup = time.monotonic() - began
        first_start, last_finish = db.read(engine, _drain_span)
        print(
            f"\n{WORKERS} workers x {CONCURRENCY} threads drained {JOBS} noop jobs in "
            f"{last_finish - first_start:.1f}s (first claim to last commit; {with_startup:.1f}s with startup)"
        )
        assert [proc.terminate(30) for proc in procs] == [0] * WORKERS
    finally:
        for proc in procs:
            if proc.alive():
                proc.kill()

    counts = db.read(engine, queries.counts_by_state)
    assert counts == {**dict.fromkeys(counts, 0), "succeeded": JOBS}
    assert settings.execution_log is not None
    executions = started_executions(settings.execution_log)
    assert set(executions) == db.read(engine, _job_ids)
    assert set(executions.values()) == {1}
    claims = db.read(engine, _claims_by_pid)
    assert sum(claims.values()) == JOBS
    assert sorted(claims) == sorted(str(proc.pid) for proc in procs)
    for proc in procs:
        output = proc.log_path.read_text()  # the process has exited and its log is closed
        assert "database is locked" not in output
        assert "Traceback" not in output
        assert "stopped:" in output
