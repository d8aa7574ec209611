"""The priority, fairness and delayed scenarios (`bench --scenario priority|fairness|delayed`): how long one
job waits to start behind a large backlog that is not its own, or after the start it asked for.

- `priority`: a backlog of `BACKLOG` queued `normal` noop jobs; each probe is one `high` noop job of the
  same tenant.
- `fairness`: tenant A holds `BACKLOG` queued `sleep` jobs of 50 ms; each probe is one `normal` job of
  tenant B.

Before each of `PROBES` probes the backlog is topped up to `BACKLOG` queued jobs (the workers drain it
meanwhile), then the probe is accepted and the scenario waits for it to start; the figures are the probes'
accept-to-start percentiles, and the queued backlog each probe found.

- `delayed`: on an idle deployment, each of `PROBES` probes is one noop job accepted with `delay_seconds`
  `DELAY_SECONDS`; the figures are how late each starts after its `run_at` (never early: a start before it
  would be a broken promise, and is counted)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sqlalchemy import Connection, func, select

from outbox_bridge.bench.observe import PhaseTimeout, percentiles_ms
from outbox_bridge.bench.phases import Run
from outbox_bridge.core import clock
from outbox_bridge.jobstore import db, intake, queries
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Job
from outbox_bridge.jobstore.schedule import Schedule
from outbox_bridge.jobstore.schema import jobs, state_is
from outbox_bridge.jobstore.states import State

BACKLOG = 5000
PROBES = 20
PROBE_TIMEOUT_SECONDS = 60.0
TOP_UP_BATCH = 500
SLEEP_SECONDS = 0.05
DELAY_SECONDS = 1.0


def priority(run: Run) -> dict[str, Any]:
    """A `high` noop job behind `BACKLOG` queued `normal` noop jobs of the same tenant."""
    tenant = run.tenant("priority")
    return _probe(run, "noop", {}, tenant, tenant, Priority.HIGH)


def fairness(run: Run) -> dict[str, Any]:
    """One job of tenant B behind tenant A's `BACKLOG` queued 50 ms `sleep` jobs."""
    sleep = {"seconds": SLEEP_SECONDS}
    return _probe(run, "sleep", sleep, run.tenant("fairness-a"), run.tenant("fairness-b"), Priority.NORMAL)


def delayed(run: Run) -> dict[str, Any]:
    """`PROBES` noop jobs, each delayed `DELAY_SECONDS` and accepted once the one before has started: how
    late after its `run_at` each one starts."""
    tenant, lates = run.tenant("delayed"), []
    for _ in range(PROBES):
        job_id = _accept(run, tenant, "noop", {}, Priority.NORMAL, Schedule(DELAY_SECONDS))
        job, started_at = _wait_started(run, job_id, DELAY_SECONDS + PROBE_TIMEOUT_SECONDS)
        assert job.run_at is not None
        lates.append(started_at - job.run_at)
    import numpy as np

    return {
        "probe": {"tenant": tenant, "kind": "noop", "delay_seconds": DELAY_SECONDS, "count": PROBES},
        "started_early": sum(1 for late in lates if late < 0),
        "probe_run_at_to_start_ms": percentiles_ms(np.array(lates)),
    }


def _probe(
    run: Run, kind: str, payload: dict[str, Any], backlog_tenant: str, probe_tenant: str, rank: Priority
) -> dict[str, Any]:
    waits, found, accepted = [], [], 0
    for _ in range(PROBES):
        if run.stop.is_set():
            raise KeyboardInterrupt
        accepted += _top_up(run, backlog_tenant, kind, payload)
        found.append(db.read(run.engine, _queued, backlog_tenant))
        job, started_at = _wait_started(run, _accept(run, probe_tenant, kind, payload, rank))
        waits.append(started_at - job.created_at)
    import numpy as np

    return {
        "backlog": {"tenant": backlog_tenant, "kind": kind, "queued_target": BACKLOG, "accepted": accepted},
        "probe": {"tenant": probe_tenant, "kind": kind, "priority": rank.label, "count": PROBES},
        "queued_at_probe": {"min": min(found), "max": max(found)},
        "probe_accept_to_start_ms": percentiles_ms(np.array(waits)),
        "probe_waits_ms": [round(wait * 1000, 1) for wait in waits],  # in the order they ran
    }


def _queued(conn: Connection, tenant: str) -> int:
    query = select(func.count()).where(jobs.c.tenant == tenant, state_is(State.QUEUED))
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
    conn: Connection,
    tenant: str,
    kind: str,
    payload: dict[str, Any],
    count: int,
    rank: Priority,
    run: Run,
    schedule: Schedule | None = None,
) -> list[str]:
    max_attempts = run.deployment.settings.max_attempts
    request: dict[str, Any] = {
        "tenant": tenant, "owner": "bench", "kind": kind, "payload": payload, "priority": rank,
        "schedule": schedule,
    }  # fmt: skip
    accepted = intake.accept_prepared(
        conn,
        [
            intake.prepare(
                **request, operation_key=uuid.uuid4().hex, now=clock.now(), max_attempts=max_attempts
            )
            for _ in range(count)
        ],
    )
    return [outcome.job.id for outcome in accepted if isinstance(outcome, intake.Accepted)]


def _accept(
    run: Run,
    tenant: str,
    kind: str,
    payload: dict[str, Any],
    rank: Priority,
    schedule: Schedule | None = None,
) -> str:
    [job_id] = db.transact(run.engine, _accept_many, tenant, kind, payload, 1, rank, run, schedule)
    return job_id


def _wait_started(run: Run, job_id: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> tuple[Job, float]:
    """The probe as read once its first attempt has started, and when that was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = db.read(run.engine, queries.get_job, job_id)
        if job is not None and job.started_at is not None:
            return job, job.started_at
        if run.stop.wait(0.01):
            raise KeyboardInterrupt
    raise PhaseTimeout(f"probe {job_id} did not start within {timeout:.0f}s")
