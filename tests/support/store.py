"""Jobs put into a test's store and read back, one call each: the store's own transitions (`accept`, `claim`)
with the arguments a test does not care about filled in. A test names only what it is about.

`now` defaults to the installed clock (`core.clock.now()`): the `clock` fixture's `FakeClock` in a test that
asks for it, the system clock otherwise. Ids and keys repeat on purpose: `accept` with the same key twice is
the same job, as the store's idempotency says."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Engine, select

from outbox_bridge.core import clock
from outbox_bridge.jobstore import claiming, db, intake, leader, queries
from outbox_bridge.jobstore.outbox import Lease
from outbox_bridge.jobstore.priorities import Priority
from outbox_bridge.jobstore.records import Claim, Job
from outbox_bridge.jobstore.schema import attempts, jobs, operator_actions, outbox
from outbox_bridge.jobstore.states import State

LEASE = 30.0  # the lease `claimed` takes unless told otherwise
RELAY = "test-relay"  # the relay role's token `publish` holds it under
# A queued noop job as the store would hand it out, never stored: what `a_job` changes.
_A_JOB = Job(
    id="8a26491b-3c5d-4e6f-8a9b-0c1d2e3f4a5b", tenant="acme", owner="alice", operation_key="op-1",
    fingerprint="f", kind="noop", payload={}, state=State.QUEUED, epoch=0, attempts=0, max_attempts=3,
    lease_owner=None, lease_expires_at=None, available_at=1_700_000_000.0, deadline_at=None,
    cancel_requested=False, external_epoch=None, checkpoint=None, checkpoint_epoch=None,
    result_attempt_id=None, error_code=None, error_message=None, created_at=1_700_000_000.0,
    updated_at=1_700_000_000.0, started_at=None, finished_at=None,
)  # fmt: skip


def a_job(**fields: Any) -> Job:
    """A job record held in memory only (for views and documents): a queued noop job of tenant acme,
    accepted at 1,700,000,000, with `fields` changed."""
    return replace(_A_JOB, **fields)


def add_job(
    conn: Connection,
    key: str = "k",
    *,
    tenant: str = "acme",
    owner: str = "alice",
    kind: str = "noop",
    payload: dict[str, Any] | None = None,
    max_attempts: int = 3,
    deadline: float | None = None,
    now: float | None = None,
    traceparent: str | None = None,
    priority: Priority = Priority.NORMAL,
    concurrency_key: str | None = None,
) -> intake.Accepted:
    """`accept` in the caller's transaction: operation key `key`, an empty payload unless given."""
    return intake.accept(
        conn,
        tenant=tenant,
        owner=owner,
        kind=kind,
        payload={} if payload is None else payload,
        operation_key=key,
        now=clock.now() if now is None else now,
        max_attempts=max_attempts,
        deadline_seconds=deadline,
        traceparent=traceparent,
        priority=priority,
        concurrency_key=concurrency_key,
    )


def accept(engine: Engine, key: str = "k", **fields: Any) -> intake.Accepted:
    """`add_job` (with the same keyword arguments) in a transaction of its own."""
    return db.transact(engine, add_job, key, **fields)


def new_job(engine: Engine, key: str = "k", **fields: Any) -> str:
    """The id of the job `accept` wrote (or found, for a key already taken)."""
    return accept(engine, key, **fields).job.id


def new_jobs(engine: Engine, count: int = 1, **fields: Any) -> list[str]:
    """The ids of `count` new jobs, each under a fresh key, accepted in one transaction at one `now`."""
    fields.setdefault("now", clock.now())
    return db.transact(
        engine, lambda conn: [add_job(conn, intake.new_id(), **fields).job.id for _ in range(count)]
    )


def claimed(
    engine: Engine, job_id: str, worker: str = "w1", *, lease: float = LEASE, now: float | None = None
) -> Claim:
    """`claim` of `job_id` by `worker`, which must succeed."""
    result = db.transact(engine, claiming.claim, job_id, worker, clock.now() if now is None else now, lease)
    assert result.claim is not None, result
    return result.claim


def job_row(engine: Engine, job_id: str) -> Job:
    """The job as the store has it now; it must exist."""
    job = db.read(engine, queries.get_job, job_id)
    assert job is not None, f"no job {job_id}"
    return job


def every_row(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """Every row of the jobs, attempts, outbox and operator actions tables, by primary key: compare two of
    them to show that a refused call wrote nothing."""

    def dump(conn: Connection) -> dict[str, list[dict[str, Any]]]:
        return {
            t.name: [dict(r) for r in conn.execute(select(t).order_by(*t.primary_key)).mappings()]
            for t in (jobs, attempts, outbox, operator_actions)
        }

    return db.read(engine, dump)


def due_rows(engine: Engine, *, now: float | None = None, limit: int = 100, tenant_cap: int = 0) -> Lease:
    """The due outbox rows the relay role's holder would read now (`leader.due`), in its order."""
    at = clock.now() if now is None else now
    found, _ = db.read(engine, leader.due, RELAY, now=at, limit=limit, tenant_cap=tenant_cap)
    return found


def publish(engine: Engine, row_ids: list[int], *, now: float | None = None) -> int:
    """Mark outbox rows published as the relay role's holder would (taking the role for `RELAY` first);
    how many were marked."""
    at = clock.now() if now is None else now

    def mark(conn: Connection) -> int:
        assert leader.take(conn, RELAY, now=at, seconds=3600.0), "another relay holds the role"
        return leader.mark_published(conn, RELAY, row_ids, at)

    return db.transact(engine, mark)


def publish_due(engine: Engine, *, now: float | None = None, limit: int = 100) -> list[int]:
    """`publish` every row `due_rows` reads; the ids published."""
    row_ids = [row_id for row_id, _ in due_rows(engine, now=now, limit=limit).rows]
    publish(engine, row_ids, now=now)
    return row_ids
