"""The priority and fairness scenarios (`bench --scenario priority|fairness`): how long one job waits to
start behind a large backlog that is not its own.

- `priority`: a backlog of `BACKLOG` queued `normal` noop jobs; each probe is one `high` noop job of the
  same tenant.
- `fairness`: tenant A holds `BACKLOG` queued `sleep` jobs of 50 ms; each probe is one `normal` job of
  tenant B.

Before each of `PROBES` probes the backlog is topped up to `BACKLOG` queued jobs (the workers drain it
meanwhile), then the probe is accepted and the scenario waits for it to start; the figures are the probes'
accept-to-start percentiles, and the queued backlog each probe found."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy import Connection, func, select

from bench.observe import PhaseTimeout, percentiles_ms
from bench.phases import Run
from core import clock
from jobstore import db, intake, queries
from jobstore.priorities import Priority
from jobstore.schema import jobs
from jobstore.states import State

BACKLOG = 5000
PROBES = 20
PROBE_TIMEOUT_SECONDS = 60.0
TOP_UP_BATCH = 500
SLEEP_SECONDS = 0.05


def priority(run: Run) -> dict[str, Any]:
    """A `high` noop job behind `BACKLOG` queued `normal` noop jobs of the same tenant."""
    tenant = run.tenant("priority")
    return _probe(run, "noop", {}, tenant, tenant, Priority.HIGH)


def fairness(run: Run) -> dict[str, Any]:
    """One job of tenant B behind tenant A's `BACKLOG` queued 50 ms `sleep` jobs."""
    sleep = {"seconds": SLEEP_SECONDS}
    return _probe(run, "sleep", sleep, run.tenant("fairness-a"), run.tenant("fairness-b"), Priority.NORMAL)


def _probe(
    run: Run, kind: str, payload: dict[str, Any], backlog_tenant: str, probe_tenant: str, rank: Priority
) -> dict[str, Any]:
    waits, found, accepted = [], [], 0
    for _ in range(PROBES):
        if run.stop.is_set():
            raise KeyboardInterrupt
        accepted += _top_up(run, backlog_tenant, kind, payload)
        found.append(db.read(run.engine, _queued, backlog_tenant))
        job_id = _accept(run, probe_tenant, kind, payload, rank)
        waits.append(_wait_started(run, job_id))
    import numpy as np

    return {
        "backlog": {"tenant": backlog_tenant, "kind": kind, "queued_target": BACKLOG, "accepted": accepted},
        "probe": {"tenant": probe_tenant, "kind": kind, "priority": rank.label, "count": PROBES},
        "queued_at_probe": {"min": min(found), "max": max(found)},
        "probe_accept_to_start_ms": percentiles_ms(np.array(waits)),
    }


def _queued(conn: Connection, tenant: str) -> int:
    query = select(func.count()).where(jobs.c.tenant == tenant, jobs.c.state == State.QUEUED.value)
    return int(conn.execute(query).scalar_one())


def _top_up(run: Run, tenant: str, kind: str, payload: dict[str, Any]) -> int:
    """Accept jobs of `tenant` until it has `BACKLOG` queued (the workers drain it meanwhile); how many
    were accepted."""
    added = 0
    while (queued := db.read(run.engine, _queued, tenant)) < BACKLOG:
        count = min(TOP_UP_BATCH, BACKLOG - queued)
        db.transact(run.engine, _accept_many, tenant, kind, payload, count, Priority.NORMAL, run)
        added += count
    return added


def _accept_many(
    conn: Connection, tenant: str, kind: str, payload: dict[str, Any], count: int, rank: Priority, run: Run
) -> list[str]:
    max_attempts = run.deployment.settings.max_attempts
    request = {"tenant": tenant, "owner": "bench", "kind": kind, "payload": payload, "priority": rank}
    accepted = intake.accept_many(
        conn,
        [
            request | {"operation_key": uuid.uuid4().hex, "now": clock.now(), "max_attempts": max_attempts}
            for _ in range(count)
        ],
    )
    return [outcome.job.id for outcome in accepted if isinstance(outcome, intake.Accepted)]


def _accept(run: Run, tenant: str, kind: str, payload: dict[str, Any], rank: Priority) -> str:
    [job_id] = db.transact(run.engine, _accept_many, tenant, kind, payload, 1, rank, run)
    return job_id


def _wait_started(run: Run, job_id: str) -> float:
    """Seconds from the probe's acceptance to its first attempt's start, once it has started."""
    deadline = time.monotonic() + PROBE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        job = db.read(run.engine, queries.get_job, job_id)
        if job is not None and job.started_at is not None:
            return job.started_at - job.created_at
        if run.stop.wait(0.01):
            raise KeyboardInterrupt
    raise PhaseTimeout(f"probe {job_id} did not start within {PROBE_TIMEOUT_SECONDS:.0f}s")
