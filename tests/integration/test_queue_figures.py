"""Each named queue's waiting jobs (queued and due, a paused kind's left out), running jobs and oldest wait,
read from the real store (SQLite and PostgreSQL) in one statement that walks the queued and the running jobs'
own indexes, never the finished jobs; shown by `status`, `status --json`, the dashboard and `/metrics`."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from outbox_bridge.api.app import create_app
from outbox_bridge.api.auth import issue_token
from outbox_bridge.core.clock import FakeClock
from outbox_bridge.core.settings import Settings
from outbox_bridge.jobstore import db, fenced, intake, pausing, queries
from outbox_bridge.jobstore.drivers import postgresql as postgresql_driver
from outbox_bridge.jobstore.drivers import sqlite as sqlite_driver
from outbox_bridge.jobstore.schedule import Schedule
from outbox_bridge.telemetry.exposition import QueueFigures
from tests.support import procs
from tests.support.scrape import parse, value
from tests.support.store import claimed, new_jobs


def on_queue(engine: Engine, queue: str, *, kind: str = "noop", **fields: Any) -> str:
    """The id of a new job of `kind` on `queue`, accepted now (or at `now`)."""
    fields.setdefault("now", time.time())
    accepted = db.transact(
        engine,
        lambda conn: intake.accept(
            conn, tenant="acme", owner="alice", kind=kind, payload={}, operation_key=intake.new_id(),
            max_attempts=3, queue=queue, **fields,
        ),
    )  # fmt: skip
    return accepted.job.id


def busy_queues(engine: Engine, clock: FakeClock) -> None:
    """default: two jobs due for 90s; fast: one due for 30s, one delayed, one running; slow: a paused kind's
    job and one running; later: a delayed job only; done: a finished job only."""
    start = clock.now()
    on_queue(engine, "default", now=start)
    on_queue(engine, "default", now=start + 30)
    on_queue(engine, "fast", now=start + 60)
    on_queue(engine, "fast", now=start, schedule=Schedule(delay_seconds=600))
    claimed(engine, on_queue(engine, "fast", now=start), now=start + 1)
    on_queue(engine, "slow", kind="export", now=start)
    claimed(engine, on_queue(engine, "slow", now=start), now=start + 1)
    on_queue(engine, "later", now=start, schedule=Schedule(delay_seconds=600))
    done = claimed(engine, on_queue(engine, "done", now=start), now=start + 1)
    db.transact(engine, fenced.complete, done.job_id, done.epoch, done.attempt_id, {}, start + 2)
    db.transact(engine, pausing.pause, "export", start + 2, actor="olga", note="provider down")
    clock.advance(90)


BUSY = [
    QueueFigures("default", waiting=2, running=0, oldest_seconds=90.0),
    QueueFigures("fast", waiting=1, running=1, oldest_seconds=30.0),
    QueueFigures("slow", waiting=0, running=1, oldest_seconds=0.0),
]


def test_each_queue_counts_its_due_and_running_jobs_and_how_long_its_oldest_has_waited(
    engine: Engine, clock: FakeClock
) -> None:
    busy_queues(engine, clock)

    assert db.read(engine, queries.queue_figures, clock.now()) == BUSY


def test_the_default_queue_is_listed_when_no_job_waits_or_runs(engine: Engine, clock: FakeClock) -> None:
    on_queue(engine, "later", now=clock.now(), schedule=Schedule(delay_seconds=600))

    assert db.read(engine, queries.queue_figures, clock.now()) == [QueueFigures("default", 0, 0, 0.0)]


ONE_STATE_WALKS = ("SEARCH jobs USING INDEX ix_jobs_queued_", "SCAN jobs USING INDEX ix_jobs_running_")


@pytest.mark.databases("sqlite")
def test_sqlite_reads_the_queues_from_the_queued_and_running_jobs_indexes(engine: Engine) -> None:
    sql = sqlite_driver.DRIVER.statement("jobs_by_queue").sql
    with engine.connect() as conn:
        raw: Any = conn.connection.driver_connection
        steps = [str(row[-1]) for row in raw.execute("EXPLAIN QUERY PLAN " + sql, {"now": 1.0})]

    reads = [step for step in steps if re.match(r"(SCAN|SEARCH) jobs\b", step)]
    assert len(reads) == 2 and all(step.startswith(ONE_STATE_WALKS) for step in reads), steps


FINISHED = 4000


@pytest.mark.databases("postgresql")
def test_postgresql_reads_the_queues_without_touching_the_finished_jobs(
    engine: Engine, clock: FakeClock
) -> None:
    """Among thousands of finished jobs, counted by ANALYZE, as a store that has run for a while has them."""
    for _ in range(FINISHED // 1000):
        new_jobs(engine, 1000)
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET state = 'succeeded', finished_at = available_at"))
    busy_queues(engine, clock)
    with engine.begin() as conn:
        conn.execute(text("ANALYZE jobs"))
    sql = postgresql_driver.DRIVER.statement("jobs_by_queue").sql
    with engine.connect() as conn:
        cursor: Any = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute("EXPLAIN " + sql, {"now": clock.now()})
        plan = "\n".join(str(row[0]) for row in cursor.fetchall())

    indexes = re.findall(r"(?:Scan using|Index Scan on) (ix_jobs_\w+)", plan)
    assert "Seq Scan on jobs" not in plan, plan
    assert {name.split("_")[2] for name in indexes} == {"queued", "running"}, plan
    assert db.read(engine, queries.queue_figures, clock.now()) == BUSY


def test_the_dashboard_shows_each_queue_in_a_table(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    busy_queues(engine, clock)
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    with TestClient(create_app(settings)) as client:
        page = client.get("/ui?refresh=0", headers={"Authorization": f"Bearer {token}"})

    assert page.status_code == 200, page.text
    section = re.search(r'<section id="queues">(.*?)</section>', page.text, re.S)
    assert section is not None, page.text
    rows = re.findall(r'<tr data-queue="([^"]+)">(.*?)</tr>', section.group(1), re.S)
    shown = [(name, " ".join(re.sub(r"<[^>]+>", " ", cells).split())) for name, cells in rows]
    assert shown == [("default", "default 2 0 90.0s"), ("fast", "fast 1 1 30.0s"), ("slow", "slow 0 1 0.0s")]


def test_the_apis_metrics_give_each_queues_waiting_running_and_oldest(
    engine: Engine, settings: Settings, clock: FakeClock
) -> None:
    busy_queues(engine, clock)
    token = issue_token(settings.auth_secret, tenant="ops", user="olga", operator=True)
    with TestClient(create_app(settings)) as client:
        response = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200, response.text
    samples = parse(response.text)
    gauges = {
        (name, queue): value(samples, f"outbox_bridge_queue_{name}", queue=queue)
        for name in ("waiting", "running", "oldest_seconds")
        for queue in ("default", "fast", "slow")
    }
    assert gauges == {
        ("waiting", "default"): 2, ("running", "default"): 0, ("oldest_seconds", "default"): 90.0,
        ("waiting", "fast"): 1, ("running", "fast"): 1, ("oldest_seconds", "fast"): 30.0,
        ("waiting", "slow"): 0, ("running", "slow"): 1, ("oldest_seconds", "slow"): 0.0,
    }  # fmt: skip
    listed = {labels for name, labels in samples if name == "outbox_bridge_queue_waiting"}
    assert listed == {frozenset({("queue", q)}) for q in ("default", "fast", "slow")}, "no idle queue"


def test_status_prints_a_table_of_the_queues_and_json_lists_them(engine: Engine, settings: Settings) -> None:
    """The command runs as a process of its own, on the real clock: ages are at least what they were."""
    start = time.time() - 120
    on_queue(engine, "default", now=start)
    on_queue(engine, "fast", now=start + 60)
    claimed(engine, on_queue(engine, "fast", now=start), now=start + 1)

    shown = procs.run(["status"], settings)
    as_json = procs.run(["status", "--json"], settings)

    assert shown.returncode in (0, 3) and as_json.returncode in (0, 3), shown.stderr + as_json.stderr
    lines = shown.stdout.splitlines()
    header = next(
        i
        for i, line in enumerate(lines)
        if line.split() == ["queue", "waiting", "running", "oldest", "waiting"]
    )
    rows = [line.split() for line in lines[header + 1 : header + 3]]
    assert [row[:3] for row in rows] == [["default", "1", "0"], ["fast", "1", "1"]], shown.stdout
    assert float(rows[0][3].rstrip("s")) >= 120 and float(rows[1][3].rstrip("s")) >= 60, shown.stdout
    queues = json.loads(as_json.stdout)["queues"]
    assert [(q["name"], q["waiting"], q["running"]) for q in queues] == [("default", 1, 0), ("fast", 1, 1)]
    assert queues[0]["oldest_seconds"] >= 120 and queues[1]["oldest_seconds"] >= 60
